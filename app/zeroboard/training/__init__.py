"""Training: what each rank runs (``python -m zeroboard.training.train``), its data, templates and reports.

Modules here import torch and transformers inside their functions only; the
web server never imports this package.
"""
