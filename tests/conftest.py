"""Shared fixtures. Tests run from the repository root (cache/ and examples/ are relative to it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
