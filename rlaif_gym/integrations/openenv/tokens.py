"""Snapshot tokens: an episode as a signed, self-contained string, and back (`SnapshotCodec`, docs/openenv.md)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from ..._version import __version__
from ...envs.snapshot import MAX_SNAPSHOT_BYTES, EnvSnapshot, decode_snapshot, encode_snapshot
from ...envs.text_env import RLAIFTextEnv
from ...errors import ConfigError
from .errors import SnapshotTokenError

SNAPSHOT_KEY_ENV = "RLAIF_SNAPSHOT_KEY"
"""Environment variable with the key that signs snapshot tokens (random per process when unset)."""


class SnapshotCodec:
    """Turns episode snapshots into signed, self-contained strings and back.

    A token is ``rlaif-snapshot-v2:<version>:<payload>:<mac>``: the payload is the snapshot as data
    (`EnvSnapshot.to_bytes()`: arrays and JSON, never pickle, fully checked when read; urlsafe base64)
    with the session's bookkeeping, and the mac its HMAC-SHA256 under the codec's key. Reading a token
    runs nothing it carries, signed or not. The key protects the episode's integrity: without it a
    client cannot hand the server a world it altered (moved a price, changed its cash or the hidden
    truth). Tokens hold the world's hidden truth: never show them to the policy.

    Args:
        key: the signing key, at least `MIN_KEY_BYTES` bytes. None: `$RLAIF_SNAPSHOT_KEY` if set, else
            random (tokens then restore only into the process that made them). Servers that should
            accept each other's tokens share one.
    """

    PREFIX = "rlaif-snapshot-v2"
    MIN_KEY_BYTES = 32
    MAX_TOKEN_CHARS = 4 * MAX_SNAPSHOT_BYTES // 3 + 256
    """The longest token read (the base64 of the largest snapshot, plus the prefix and mac)."""

    def __init__(self, key: bytes | str | None = None) -> None:
        if key is None:
            key = os.environ.get(SNAPSHOT_KEY_ENV) or secrets.token_bytes(32)
        self._key = key.encode() if isinstance(key, str) else bytes(key)
        if len(self._key) < self.MIN_KEY_BYTES:
            raise ConfigError(
                f"the snapshot signing key (${SNAPSHOT_KEY_ENV}) has {len(self._key)} bytes; it needs at least "
                f"{self.MIN_KEY_BYTES} (a short key can be guessed, and whoever has it can hand the server any "
                "episode state). Make one with: python -c \"import secrets; print(secrets.token_hex(32))\", or "
                "unset the variable for a random key per process")

    def _mac(self, signed: str) -> str:
        return hmac.new(self._key, signed.encode("ascii"), hashlib.sha256).hexdigest()

    def encode(self, snapshot: EnvSnapshot, meta: Mapping[str, Any]) -> str:
        """A token for `snapshot` and the session's bookkeeping `meta` (plain JSON values)."""
        body = base64.urlsafe_b64encode(encode_snapshot(snapshot, dict(meta))).decode("ascii")
        signed = f"{self.PREFIX}:{__version__}:{body}"
        return f"{signed}:{self._mac(signed)}"

    def decode(self, token: object) -> tuple[EnvSnapshot, dict[str, Any]]:
        """The text-env snapshot and bookkeeping of a token this codec made.

        Raises:
            SnapshotTokenError: not a token, altered, signed with another key, made by another version,
                or holding something other than a text-env snapshot.
        """
        if not isinstance(token, str):
            raise SnapshotTokenError(f"a snapshot token is the string snapshot() returned, got {type(token).__name__}")
        if len(token) > self.MAX_TOKEN_CHARS or not token.isascii():
            what = f"{len(token)} characters" if len(token) > self.MAX_TOKEN_CHARS else "non-ASCII characters"
            raise SnapshotTokenError(f"not a snapshot token (it has {what}; a token is the ASCII string "
                                     "snapshot() returned); pass it unchanged")
        signed, _, mac = token.rpartition(":")
        prefix, _, rest = signed.partition(":")
        version, _, body = rest.partition(":")
        if prefix != self.PREFIX or not body or not mac:
            raise SnapshotTokenError(f"not a snapshot token (it should start with {self.PREFIX + ':'!r}, got "
                                     f"{token[:40]!r}); pass the string snapshot() returned, unchanged")
        if not hmac.compare_digest(mac, self._mac(signed)):
            raise SnapshotTokenError(
                "this snapshot token was not signed by this server: it was altered, or made by another server or "
                f"before a restart (each process signs with a random key unless ${SNAPSHOT_KEY_ENV} sets a shared "
                "one). Take a new snapshot here, or start every server with the same key"
            )
        if version != __version__:
            raise SnapshotTokenError(f"this snapshot was made by rlaif-gym {version}; this server runs {__version__}, "
                                     "and a snapshot restores only into the version that made it")
        try:
            return decode_snapshot(base64.urlsafe_b64decode(body), env_class=RLAIFTextEnv)
        except (binascii.Error, ValueError) as exc:  # SnapshotFormatError is a ValueError
            raise SnapshotTokenError(f"the snapshot token is signed but unreadable ({exc})") from None


_DEFAULT_CODEC: SnapshotCodec | None = None
_DEFAULT_CODEC_LOCK = threading.Lock()


def _default_codec() -> SnapshotCodec:
    """One codec per process, so tokens move between sessions of the same process."""
    global _DEFAULT_CODEC
    with _DEFAULT_CODEC_LOCK:
        if _DEFAULT_CODEC is None:
            _DEFAULT_CODEC = SnapshotCodec()
        return _DEFAULT_CODEC
