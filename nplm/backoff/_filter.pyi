"""Type stubs of the extension module nplm.backoff._filter (written by tools/make_stubs.py)."""
from typing import Any


class Input:
    def __len__(self, *args: Any, **kwargs: Any) -> Any: ...

MODES: dict
PHRASE_MODES: dict

class Phrases:
    sentences: Any
    substrings: Any


class Vocabulary:
    sentences: Any
    words: Any

def run(data: Any, vocab: Any, mode: str, context: bool, arpa: bool, fds: Any, memory: Any, threads: int = ..., chunk: int = ..., split_min: int = ..., wait_second: bool = ..., phrases: Any = ...) -> Any: ...
