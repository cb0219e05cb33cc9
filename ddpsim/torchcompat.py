"""The one place where ddpsim touches torch's private or version-dependent APIs.

Every use of a private torch attribute or function (names starting with ``_``), or of behaviour
that changed between torch releases, goes through a function in this module, so that a new torch
release needs checking in one file. Each function says which torch versions it was checked on and
what it falls back to when the private API is missing.
"""
from __future__ import annotations
