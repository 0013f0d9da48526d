"""`engram mcp` as the harness speaks to it: one process per cwd, newline-delimited JSON-RPC over stdio."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from engram_sync_kit.engram_contract import children
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.errors import StepFailed
from engram_sync_kit.harness.evidence import Evidence


class McpSession:
    """`engram mcp` started in one cwd, spoken to with newline-delimited JSON-RPC."""

    def __init__(
        self,
        env: EngramEnvironment,
        cwd: Path,
        extra_env: dict[str, str],
        log_path: Path,
        evidence: Evidence | None = None,
    ) -> None:
        self.cwd = cwd
        self._evidence = evidence
        self._log = log_path.open("ab")
        self._process = children.track(
            subprocess.Popen(
                [str(env.binary), "mcp"],
                cwd=cwd,
                env=env.env(extra_env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
            )
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._pump, daemon=True).start()
        self.request(
            "initialize",
            {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "engram-harness", "version": "1"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})

    def _pump(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise StepFailed(f"engram mcp did not answer {method} within {timeout:.0f}s") from None
            if line is None:
                raise StepFailed(f"engram mcp exited while answering {method} (exit {self._process.poll()})")
            message = json.loads(line)
            if message.get("id") != request_id:
                continue
            if "error" in message:
                raise StepFailed(f"engram mcp {method}: {message['error'].get('message', message['error'])}")
            result: dict[str, Any] = message.get("result", {})
            return result

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(part.get("text", "") for part in result.get("content", []))
        if self._evidence is not None:
            self._evidence.request(
                {
                    "via": "mcp",
                    "cwd": str(self.cwd),
                    "tool": tool,
                    "arguments": arguments,
                    "error": bool(result.get("isError")),
                    "answer": text,
                }
            )
        if result.get("isError"):
            raise StepFailed(f"engram mcp {tool} failed: {text}")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return {"text": text}
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        children.forget(self._process)
        self._log.close()
