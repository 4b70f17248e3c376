"""The data layer's common words: a message, a conversation, and the error a dataset raises.

Pure Python (no transformers, no ``datasets``).  Every record of every format
becomes a list of chat messages ``{"role": ..., "content": str}``
(``convert``); ``info`` says where a dataset is and how its records read;
``records`` reads the first records of a file.  The trainer reads datasets
of any size through the ``datasets`` library (``zeroboard.training.dataload``).
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]  # "role" and "content" (str); an answer's "tool_calls" (data.tools.call)
Conversation = list[Message]


class DataError(ValueError):
    """A dataset cannot be used; the message says which and how to fix it."""


class Skipped(DataError):
    """A record LLaMA-Factory skips (its turns out of order, no answer at its end, no response): left out and
    counted, the first one shown; not an error of the dataset."""
