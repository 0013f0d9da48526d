"""Seed-determined names and texts (Faker), and the rng helpers the history is drawn with."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from faker import Faker

from engram_sync_kit.harness.deployment.spec import DeploymentError

TEXT_POOL_SIZE = 512
# Keys the history uses by name: a generated repo name must never collide with one of them.
RESERVED_KEYS = ("/", "prueba", "scratchpad", "notes", "documents", "inbox", "unsorted", "workspace", "cloud")
_T = TypeVar("_T")


class Names:
    """Faker-made, seed-determined names and texts; a pool keeps a million rows fast."""

    def __init__(self, seed: int, rng: random.Random) -> None:
        self.fake = Faker("en_US")
        self.fake.seed_instance(seed)
        self.rng = rng
        self.used: set[str] = set(RESERVED_KEYS)
        self.titles = [self.fake.sentence(nb_words=6).rstrip(".") for _ in range(TEXT_POOL_SIZE)]
        self.contents = [self.fake.paragraph(nb_sentences=3) for _ in range(TEXT_POOL_SIZE * 4)]
        self.prompts = [self.fake.sentence(nb_words=12) for _ in range(TEXT_POOL_SIZE)]
        self.reasons = [self.fake.sentence(nb_words=8) for _ in range(TEXT_POOL_SIZE // 4)]

    def unique(self, make: Callable[[], object]) -> str:
        for _ in range(1000):
            name = str(make())
            if name not in self.used:
                self.used.add(name)
                return name
        raise DeploymentError("faker ran out of distinct names; use another --seed")

    def repo(self) -> str:
        return self.unique(lambda: f"{self.fake.word()}-{self.fake.word()}".lower())

    def user(self) -> str:
        return self.unique(lambda: "".join(c for c in self.fake.user_name().lower() if c.isalnum()) or "user")

    def uuid(self) -> str:
        """A random (version 4) UUID drawn from the seeded rng."""
        bits = (self.rng.getrandbits(128) & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC000 << 48) | (
            0x8000 << 48
        )
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def hex_id(self, prefix: str) -> str:
        return f"{prefix}-{self.rng.getrandbits(64):016x}"

    def title(self) -> str:
        return pick(self.rng, self.titles)

    def content(self) -> str:
        return pick(self.rng, self.contents)


def pick(rng: random.Random, items: Sequence[_T]) -> _T:
    """rng.choice without its per-call overhead (a million rows call it several million times)."""
    return items[int(rng.random() * len(items))]


def split(total: int, parts: int, rng: random.Random, minimum: int = 0) -> list[int]:
    """`total` spread over `parts` buckets, each at least `minimum`, deterministic for the rng."""
    counts = [minimum] * parts
    for _ in range(total - minimum * parts):
        counts[rng.randrange(parts)] += 1
    return counts
