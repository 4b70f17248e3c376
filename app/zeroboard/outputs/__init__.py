"""After a run: what it saved (:mod:`.inspect`), making it a loadable model (:mod:`.export`), and checking
that it reloads and answers (:mod:`.reload`).

Inspecting is light and runs in the web server; exporting and reloading
import torch inside their functions, so the server runs them as a subprocess.
"""
