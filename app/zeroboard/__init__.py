"""ZeroBoard: a web dashboard for fine-tuning causal LMs with DeepSpeed ZeRO."""

__version__ = "0.1.0"
