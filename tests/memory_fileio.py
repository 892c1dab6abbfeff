"""A pyiceberg FileIO kept in memory (``py-io-impl: memory_fileio.MemoryFileIO``), for locations of a
scheme no local path has (``mem://bucket/...``): code that reaches the state root through FileIO is
tested the way it runs on an object store (no listing, no rename, no local path), without one."""
from __future__ import annotations

import io
import threading

from pyiceberg.io import FileIO, InputFile, OutputFile

STORE: dict[str, bytes] = {}
_LOCK = threading.Lock()


class _Input(InputFile):
    def __len__(self) -> int:
        return len(STORE[self.location])

    def exists(self) -> bool:
        return self.location in STORE

    def open(self, seekable: bool = True):
        try:
            return io.BytesIO(STORE[self.location])
        except KeyError:
            raise FileNotFoundError(self.location) from None


class _Stream(io.BytesIO):
    def __init__(self, location: str):
        super().__init__()
        self.location = location

    def close(self) -> None:
        if not self.closed:
            with _LOCK:
                STORE[self.location] = self.getvalue()  # whole, at once: an object store's put
        super().close()


class _Output(OutputFile):
    def __len__(self) -> int:
        return len(STORE[self.location])

    def exists(self) -> bool:
        return self.location in STORE

    def to_input_file(self) -> InputFile:
        return _Input(self.location)

    def create(self, overwrite: bool = False):
        if not overwrite and self.exists():
            raise FileExistsError(self.location)
        return _Stream(self.location)


class MemoryFileIO(FileIO):
    def new_input(self, location: str) -> InputFile:
        return _Input(location)

    def new_output(self, location: str) -> OutputFile:
        return _Output(location)

    def delete(self, location) -> None:
        location = location if isinstance(location, str) else location.location
        with _LOCK:
            if STORE.pop(location, None) is None:
                raise FileNotFoundError(location)
