"""`--keep [DIR]`, one spelling for every harness command that can keep its working directories."""

from __future__ import annotations

#: the value of `--keep` given without DIR: keep in the system's temporary directory
KEEP_IN_TEMP = "\0temp"
