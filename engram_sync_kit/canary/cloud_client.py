"""Read-only access to the user's engram cloud: where it is, and its read routes.

Where engram v1.20.0 keeps its cloud settings (cmd/engram/main.go `resolveCloudRuntimeConfig`,
cmd/engram/cloud.go `cloudConfig` and `cloudConfigPath`, tag v1.20.0 = commit ba9e46ce): the file
`<data dir>/cloud.json` with `server_url` and `token`, each overridden by ENGRAM_CLOUD_SERVER and
ENGRAM_CLOUD_TOKEN. Go's TLS client trusts the system roots plus SSL_CERT_FILE / SSL_CERT_DIR.

Only GET routes are used: the mutation pull (paged by server seq) and the chunk manifest and chunks.
Every failure is a ``CloudUnavailable`` with a one-line message; nothing here pushes, acks or changes
anything in the cloud.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from engram_sync_kit.canary.deadline_http import DeadlineTransport
from engram_sync_kit.canary.deadline_json import DeadlinePassed, loads_by
from engram_sync_kit.canary.errors import CanaryError

PULL_PAGE_LIMIT = 100  # the server's own cap (cloudserver/mutations.go defaultPullLimit)
# --timeout bounds the whole cloud read: every connect, handshake, answer and page.
DEFAULT_TIMEOUT_SECONDS = 300.0
# A cloud decides how many answers it gives; these caps decide how many reconcile asks for.
MAX_PULL_PAGES = 50_000  # 5,000,000 rows, 48x the benchmark deployment; beyond it --since is the way
MAX_SEARCH_PROBES = 200  # a --since search over the whole int64 seq space needs at most ~128
MAX_CHUNK_READS = 10_000
# cloud_mutations.seq is a Postgres BIGSERIAL (cloudstore.go): 1 .. 2^63-1; Go's int64 decodes no more.
SEQ_MAX = 2**63 - 1
# v1.20's ids are 8 hex characters (chunkcodec); anything that could change the request's path is refused.
CHUNK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A pull page is at most 100 rows and a chunk push at most the server's body limit (8 MiB by default).
MAX_ANSWER_BYTES = 64 * 1024 * 1024
CLOUD_CONFIG_FILE = "cloud.json"


class CloudUnavailable(CanaryError):
    """The cloud could not be read, or answered something reconcile cannot trust."""


class CloudSettingsError(CanaryError):
    """The cloud's URL, token or CA are missing or unusable."""


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class CloudSettings:
    url: str
    token: str | None
    ca_file: Path | None
    url_source: str
    token_source: str | None


def _read_cloud_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise CloudSettingsError(f"{path}: cannot be read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise CloudSettingsError(f"{path}: not valid JSON ({error})") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as error:
        raise CloudSettingsError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise CloudSettingsError(f"{path}: expected a JSON object with server_url and token")
    return data


def _text(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise CloudSettingsError(f"{where}: expected a string, got {type(value).__name__}")
    return value.strip() or None


def resolve_settings(
    data_dir: Path,
    *,
    url: str | None = None,
    token_file: Path | None = None,
    ca_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> CloudSettings:
    """Flags first, then engram's own environment variables, then engram's cloud.json in data_dir."""
    env = os.environ if environ is None else environ
    config_path = data_dir / CLOUD_CONFIG_FILE
    stored = _read_cloud_json(config_path)
    url_candidates = (
        (url, "--cloud-url"),
        (env.get("ENGRAM_CLOUD_SERVER"), "ENGRAM_CLOUD_SERVER"),
        (_text(stored.get("server_url"), f"{config_path}: server_url"), str(config_path)),
    )
    chosen = next(
        ((value.strip(), source) for value, source in url_candidates if value and value.strip()), None
    )
    if chosen is None:
        raise CloudSettingsError(
            "no cloud URL: pass --cloud-url, set ENGRAM_CLOUD_SERVER, or run `engram cloud config --server URL`"
        )
    base_url, url_source = chosen
    token, token_source = _resolve_token(token_file, env, stored, config_path)
    try:
        parts = urlsplit(base_url)
        hostname = parts.hostname
    except ValueError:  # an unclosed [IPv6 literal
        hostname = None
    if not hostname or parts.scheme not in ("http", "https"):
        raise CloudSettingsError(
            f"cloud URL {base_url!r} (from {url_source}) is not an http(s) URL with a host"
        )
    if parts.query or parts.fragment:
        raise CloudSettingsError(
            f"cloud URL {base_url!r} (from {url_source}): query and fragment are not allowed"
        )
    if token is not None and parts.scheme != "https":
        raise CloudSettingsError(
            f"refusing to send the cloud token over plain http to {base_url} (from {url_source}); use an https URL"
        )
    ca = ca_file
    if ca is None and env.get("SSL_CERT_FILE", "").strip():
        ca = Path(env["SSL_CERT_FILE"].strip())
    if ca is not None and not ca.is_file():
        raise CloudSettingsError(f"CA file {ca}: no such file")
    return CloudSettings(base_url.rstrip("/"), token, ca, url_source, token_source)


def _resolve_token(
    token_file: Path | None, env: Mapping[str, str], stored: dict[str, Any], config_path: Path
) -> tuple[str | None, str | None]:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise CloudSettingsError(f"--cloud-token-file {token_file}: cannot be read ({error})") from None
        if not token:
            raise CloudSettingsError(f"--cloud-token-file {token_file}: empty")
        return token, "--cloud-token-file"
    if env.get("ENGRAM_CLOUD_TOKEN", "").strip():
        return env["ENGRAM_CLOUD_TOKEN"].strip(), "ENGRAM_CLOUD_TOKEN"
    stored_token = _text(stored.get("token"), f"{config_path}: token")
    return (stored_token, str(config_path)) if stored_token else (None, None)


@dataclass(frozen=True, slots=True)
class CloudMutation:
    seq: int
    project: str
    entity: str
    entity_key: str
    op: str
    payload: Any
    occurred_at: str


@dataclass(frozen=True)
class PullPage:
    mutations: list[CloudMutation]
    has_more: bool


@dataclass(frozen=True)
class ChunkEntry:
    chunk_id: str
    created_by: str
    created_at: str


class CloudReader:
    """GET-only client over one httpx connection pool; counts the requests it made.

    Everything it reads ends by one deadline, `timeout` seconds after `started` (time.monotonic(); by
    default when the reader is made)."""

    def __init__(
        self, settings: CloudSettings, timeout: float = DEFAULT_TIMEOUT_SECONDS, started: float | None = None
    ) -> None:
        self.settings = settings
        self.requests = 0
        self.chunks_read = 0
        self.timeout = timeout
        self.deadline = (time.monotonic() if started is None else started) + timeout
        headers = {"Accept": "application/json", "User-Agent": "engram-canary-reconcile"}
        if settings.token is not None:
            headers["Authorization"] = f"Bearer {settings.token}"
        try:
            verify: ssl.SSLContext = ssl.create_default_context(
                cafile=str(settings.ca_file) if settings.ca_file else None
            )
        except (OSError, ssl.SSLError) as error:
            raise CloudSettingsError(
                f"CA file {settings.ca_file}: not a usable PEM bundle ({error})"
            ) from None
        self._http = httpx.Client(
            base_url=settings.url,
            headers=headers,
            timeout=timeout,
            transport=DeadlineTransport(verify, self.deadline),
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CloudReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, str | int] | None = None) -> tuple[int, bytes]:
        """(status, body) of one GET; the whole answer must arrive within the timeout and the size cap."""
        where = f"GET {path}"
        if time.monotonic() >= self.deadline:
            raise CloudUnavailable(self._late(where))
        self.requests += 1
        try:
            with self._http.stream("GET", path, params=params) as response:
                body = bytearray()
                for piece in response.iter_bytes():
                    body += piece
                    if len(body) > MAX_ANSWER_BYTES:
                        raise CloudUnavailable(f"{where}: answer larger than {MAX_ANSWER_BYTES >> 20} MiB")
                    if time.monotonic() > self.deadline:
                        raise httpx.ReadTimeout("too slow")
                status = response.status_code
        except httpx.ConnectError as error:
            raise CloudUnavailable(_connect_failure(self.settings, where, error)) from None
        except httpx.TimeoutException:
            raise CloudUnavailable(self._late(where)) from None
        except httpx.RemoteProtocolError as error:
            raise CloudUnavailable(
                f"{where} on {self.settings.url}: truncated answer ({one_line(str(error))})"
            ) from None
        except httpx.HTTPError as error:
            raise CloudUnavailable(
                f"{where} on {self.settings.url}: {type(error).__name__}: {one_line(str(error))}"
            ) from None
        if status == 401:
            raise CloudUnavailable(
                f"{where}: the cloud refused the token (401 {_error_text(body)}); "
                f"token from {self.settings.token_source or 'nowhere (none configured)'}"
            )
        if status == 403:
            raise CloudUnavailable(f"{where}: the cloud forbids this read (403 {_error_text(body)})")
        if status != 200:
            raise CloudUnavailable(f"{where}: HTTP {status} {_error_text(body)}")
        return status, bytes(body)

    def _late(self, where: str) -> str:
        return f"{where} on {self.settings.url}: not done within --timeout {self.timeout:g} s ({self.requests} requests)"

    def _json(self, path: str, params: dict[str, str | int] | None = None) -> Any:
        _, body = self._get(path, params)
        try:
            return loads_by(body, self.deadline)  # parsing a big answer counts against --timeout too
        except DeadlinePassed:
            raise CloudUnavailable(self._late(f"GET {path}")) from None
        except (ValueError, RecursionError) as error:
            raise CloudUnavailable(
                f"GET {path}: truncated or malformed JSON ({one_line(str(error), 120)}; {len(body)} bytes)"
            ) from None

    def pull_page(self, since_seq: int, limit: int = PULL_PAGE_LIMIT) -> PullPage:
        path = "/sync/mutations/pull"
        body = self._json(path, {"since_seq": since_seq, "limit": limit})
        if not isinstance(body, dict) or not isinstance(body.get("mutations"), list):
            raise CloudUnavailable(f"GET {path}: answer has no 'mutations' list")
        has_more = body.get("has_more", False)
        if not isinstance(has_more, bool):
            raise CloudUnavailable(f"GET {path}: 'has_more' is not a boolean")
        if len(body["mutations"]) > limit:
            raise CloudUnavailable(
                f"GET {path}?since_seq={since_seq}: {len(body['mutations'])} mutations, more than the {limit} asked"
            )
        mutations = [_cloud_mutation(raw, index, path) for index, raw in enumerate(body["mutations"])]
        previous = since_seq
        for index, mutation in enumerate(mutations):
            if mutation.seq <= previous:
                raise CloudUnavailable(
                    f"GET {path}?since_seq={since_seq}: seq {mutation.seq} does not increase past {previous}"
                )
            if mutation.seq > SEQ_MAX:
                raise CloudUnavailable(
                    f"GET {path}?since_seq={since_seq}: mutations[{index}].seq {mutation.seq} "
                    f"is outside the protocol's range 1..{SEQ_MAX}"
                )
            previous = mutation.seq
        if has_more and not mutations:
            raise CloudUnavailable(
                f"GET {path}?since_seq={since_seq}: truncated page (has_more but no mutations)"
            )
        return PullPage(mutations, has_more)

    def pull_from(self, since_seq: int) -> Iterator[CloudMutation]:
        """Every mutation after since_seq, page by page, the way engram's own worker pages."""
        rows = 0
        for _ in range(MAX_PULL_PAGES):
            page = self.pull_page(since_seq)
            yield from page.mutations
            if not page.has_more:
                return
            rows += len(page.mutations)
            since_seq = page.mutations[-1].seq
        raise CloudUnavailable(
            f"GET /sync/mutations/pull?since_seq={since_seq}: has_more after {MAX_PULL_PAGES} pages "
            f"({rows} rows); reconcile stops there (a cloud this size needs --since)"
        )

    def first_after(self, since_seq: int) -> CloudMutation | None:
        page = self.pull_page(since_seq, limit=1)
        return page.mutations[0] if page.mutations else None

    def start_seq_for(self, cutoff: datetime) -> int:
        """The smallest since_seq whose pull holds only mutations stored at or after cutoff.

        A binary search with one-row pulls: O(log n) requests instead of reading the whole log. It relies
        on occurred_at growing with seq (both are assigned on insert: cloudstore.go, cloud_mutations).
        """

        probes = 0

        def settled(since: int) -> tuple[bool, int]:
            nonlocal probes
            if probes >= MAX_SEARCH_PROBES:
                raise CloudUnavailable(
                    f"GET /sync/mutations/pull: the --since search did not settle within {MAX_SEARCH_PROBES} one-row pulls"
                )
            probes += 1
            probe = self.first_after(since)
            if probe is None or _instant(probe.occurred_at) >= cutoff:
                return True, since
            return False, probe.seq - 1  # every since up to here finds the same older row

        done, low = settled(0)
        if done:
            return 0
        high = min(2 * (low + 1), SEQ_MAX)
        while True:  # ends: high doubles up to SEQ_MAX, and no row may lie past it
            done, older = settled(high)
            if done:
                break
            low, high = older, min(2 * (older + 1), SEQ_MAX)
        while high - low > 1:
            middle = (low + high) // 2
            done, older = settled(middle)
            if done:
                high = middle
            else:
                low = max(middle, older)
        return high

    def manifest(self, project: str) -> list[ChunkEntry]:
        path = "/sync/pull"
        body = self._json(path, {"project": project})
        chunks = body.get("chunks") if isinstance(body, dict) else None
        if chunks is None and isinstance(body, dict) and "chunks" in body:
            chunks = []
        if not isinstance(chunks, list):
            raise CloudUnavailable(f"GET {path}?project={project}: answer has no 'chunks' list")
        where = f"GET {path}?project={project}"
        entries = []
        for index, raw in enumerate(chunks):
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"].strip():
                raise CloudUnavailable(f"{where}: chunks[{index}] has no id")
            chunk_id = raw["id"].strip()
            if not CHUNK_ID.fullmatch(chunk_id):
                raise CloudUnavailable(f"{where}: chunks[{index}].id {chunk_id!r} is not a chunk id")
            created_by, created_at = (
                _optional_text(raw, name, f"{where}: chunks[{index}]")
                for name in ("created_by", "created_at")
            )
            entries.append(ChunkEntry(chunk_id, created_by, created_at))
        return entries

    def chunk(self, project: str, chunk_id: str) -> dict[str, Any]:
        """One chunk, its shape checked: the lists reconcile reads hold objects with string keys."""
        path = f"/sync/pull/{chunk_id}"
        where = f"GET {path}?project={project}"
        if self.chunks_read >= MAX_CHUNK_READS:
            raise CloudUnavailable(
                f"{where}: more than {MAX_CHUNK_READS} chunks to read; reconcile stops there"
            )
        self.chunks_read += 1
        body = self._json(path, {"project": project})
        if not isinstance(body, dict):
            raise CloudUnavailable(f"{where}: the chunk is not a JSON object")
        for name, keys in CHUNK_LISTS.items():
            items = body.get(name)
            if items is None:
                continue
            if not isinstance(items, list):
                raise CloudUnavailable(f"{where}: {name!r} is not a list")
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    raise CloudUnavailable(f"{where}: {name}[{index}] is not an object")
                for key in keys:
                    _optional_text(item, key, f"{where}: {name}[{index}]")
        return body


# The lists of a chunk that reconcile reads, and the fields of their items that must be text when present.
CHUNK_LISTS = {
    "mutations": ("entity", "entity_key", "op"),
    "sessions": ("id",),
    "observations": ("sync_id",),
    "prompts": ("sync_id",),
}


def _optional_text(raw: dict[str, Any], name: str, where: str) -> str:
    value = raw.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CloudUnavailable(f"{where}.{name} is not a string")
    return value


def _cloud_mutation(raw: Any, index: int, path: str) -> CloudMutation:
    if not isinstance(raw, dict):
        raise CloudUnavailable(f"GET {path}: mutations[{index}] is not an object")
    seq = raw.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise CloudUnavailable(f"GET {path}: mutations[{index}].seq is not an integer")
    fields = {}
    for name in ("entity", "entity_key", "op"):
        value = raw.get(name)
        if not isinstance(value, str):
            raise CloudUnavailable(f"GET {path}: mutations[{index}].{name} is not a string")
        fields[name] = value.strip()
    where = f"GET {path}: mutations[{index}]"
    return CloudMutation(
        seq=seq,
        project=_optional_text(raw, "project", where),
        payload=raw.get("payload"),
        occurred_at=_optional_text(raw, "occurred_at", where),
        **fields,
    )


def _instant(text: str) -> datetime:
    """An RFC 3339 time, or the far past when the cloud gave none (the row is then always pulled)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _error_text(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return one_line(text, 160)
    if isinstance(decoded, dict):
        return one_line(str(decoded.get("error") or decoded.get("error_code") or decoded), 160)
    return one_line(str(decoded), 160)


def _connect_failure(settings: CloudSettings, where: str, error: httpx.ConnectError) -> str:
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        hint = (
            "pass --cloud-ca or set SSL_CERT_FILE" if settings.ca_file is None else f"CA {settings.ca_file}"
        )
        return f"{where} on {settings.url}: TLS certificate not trusted ({one_line(cause.verify_message or str(cause), 120)}; {hint})"
    if isinstance(cause, ssl.SSLError):
        return f"{where} on {settings.url}: TLS failure ({one_line(cause.reason or str(cause), 120)})"
    return f"{where} on {settings.url}: cannot connect ({one_line(str(error), 160)})"
