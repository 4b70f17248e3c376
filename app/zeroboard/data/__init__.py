"""Training data as users have it: dataset_info.json entries, the files they name, and the demo data.

Pure Python: the web server reads a few records for validation and the
dataset preview; the trainer reads the whole dataset.
"""
