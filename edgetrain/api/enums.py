"""`StrEnum` on every Python the node side runs on: 3.11+ has it, JetPack 6's 3.10 does not."""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        """3.11's StrEnum: members are str, and str() and format() give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


__all__ = ["StrEnum"]
