"""The in-sandbox command server and its client, shared by every backend.

A backend's only job is to start a sandbox and give us one duplex byte stream
to ``bash -c SERVER_SCRIPT`` running inside it (a docker attach socket to the
container's own stdin and stdout, the stdin and stdout of ``enroot start``, a
Kubernetes exec websocket). Over that stream
every command costs a couple of forks inside the sandbox instead of a new
``docker exec``.

Wire protocol (all lengths in bytes, fields separated by one space)::

    request  X id timeout cwd_len cmd_len env_len\\n cwd cmd env
             W id path_len data_len mode\\n path data        (write a file)
             F id path_len 0 0\\n path                         (read a file)
    reply    R id returncode timed_out total head tail\\n head-bytes tail-bytes
    ready    SWERL-READY server-pid server-dir\\n   (once, when the script is loaded)

``timed_out`` is 0, or why the command's process group was killed: 1 its timeout, 2 its
output, 3 an interrupt. An interrupt is the line ``K`` written into ``server-dir/ctl``
from beside the channel (a second exec, see ``ChannelSandbox.interrupt``): the channel
itself carries no cancel, since the server does not read it while a command runs.

The server needs only bash and coreutils. Each command runs as a fresh
``bash -c`` in its own process group (``set -m``), with stdout and stderr
merged into one file in the order they were written: one fork per command (the
floor: the command's own ``bash -c``). A watchdog process started with the
server kills the whole group with SIGKILL at the timeout. Output beyond the cap
is sent as its head and tail.
Replies are length-framed, so any bytes (NUL, invalid UTF-8) pass unharmed.

Commands on one channel are serialized: the server runs one at a time and the
client holds a lock for each request/reply. Open more sandboxes for parallelism.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from swerl.errors import SandboxError
from swerl.sandbox.base import ExecResult, SandboxConfig

SERVER_SCRIPT = r"""
_lc=${LC_ALL-__swerl_unset__}
LC_ALL=C
cap=${1:-1048576}
maxout=${2:-67108864}
fsize=${3:-0}
small=$((cap < 65536 ? cap : 65536))
d=$(mktemp -d /tmp/.swerl.XXXXXXXX) || exit 90
mkfifo "$d/ctl" "$d/verdict" || exit 91
exec 3<>"$d/verdict" 4<>"$d/ctl"
# The server's own diagnostics go to a file, but the channel's stderr stays open on fd 5
# for the server's life: a runtime may end the whole channel when the process closes its
# stderr (containerd's CRI closes an exec's stdin as soon as its stdout or stderr closes).
exec 5>&2 2>>"$d/server.err"
trap 'rm -rf -- "$d"' EXIT
set -m
err="$d/err"
# Each command's subshell execs bash -c (one fork) and the server blocks in
# `wait` for it. The limits are a watchdog's job, a process started once: told
# "A id pid limit" when a command starts and "D" when it ended, it kills the
# command's group at the timeout or when its output grows too big, and writes its
# verdict (before the kill) for the server to read after the wait. The server
# is never signalled: a signal caught while bash waits can land just as the
# kernel hands over the child's status, and bash then loses it and waits forever.
(
    now() { if [ -n "$EPOCHREALTIME" ]; then t=${EPOCHREALTIME/./}; else t=$(date +%s%6N); fi; }
    while IFS=' ' read -r op cid cpid climit; do
        [ "$op" = A ] || continue
        now
        t0=$t ticks=0 to=0
        until IFS= read -r -t 0.25 msg; do
            # the timer fired mid-line: the rest of the (atomically written) line is there
            [ -n "$msg" ] && IFS= read -r rest && break
            now
            if [ "$climit" -gt 0 ] && [ $((t - t0)) -ge "$climit" ]; then
                to=1
            elif (((ticks += 1) < 4 || ticks % 4 == 0)) &&
                [ "$(stat -c %s -- "$d/out.$cid" 2>/dev/null || echo 0)" -gt "$maxout" ]; then
                to=2
            fi
            if [ "$to" != 0 ]; then
                printf '%s %s\n' "$cid" "$to" >&3
                kill -KILL -- "-$cpid" 2>/dev/null
                IFS= read -r msg
                break
            fi
        done
        # K: an interrupt, written into ctl from beside the channel (ChannelSandbox.interrupt)
        # while this command runs; one that comes after the command's D is read above and ignored.
        if [ "$msg" = K ]; then
            printf '%s 3\n' "$cid" >&3
            kill -KILL -- "-$cpid" 2>/dev/null
            IFS= read -r msg
        fi
    done
) <"$d/ctl" >/dev/null 4>&- 5>&- &  # read-only: end of file once the server is gone
reply() {  # rc timed_out file
    # Small outputs are read and sent by bash builtins (NUL-delimited chunks),
    # which saves two fork+execs per command; large ones, and ones with many NUL
    # bytes (one loop turn each), go through stat and cat.
    local size=0 n=0 part= big=0 i
    size_forked=
    local -a parts=()
    if [ -s "$3" ]; then
        # -n bounds each read: bash reads a large output with no NUL byte (a text file
        # of megabytes) a character at a time, ~14 ns a byte, before it could tell.
        while IFS= read -r -d '' -n "$((small + 1))" part; do
            parts[n++]=$part
            size=$((size + ${#part} + 1))
            if ((size > small || n > 64)); then big=1; break; fi
        done <"$3"
        [ "$big" = 0 ] && size=$((size + ${#part})) && [ "$size" -gt "$small" ] && big=1
    fi
    if [ "$big" = 0 ]; then
        # One write for header and body when the output has no NUL byte (the common
        # case): one frame on the channel, one wake-up of the client.
        if ((n == 0)); then
            printf 'R %s %s %s %s %s 0\n%s' "$id" "$1" "$2" "$size" "$size" "$part"
            return
        fi
        printf 'R %s %s %s %s %s 0\n' "$id" "$1" "$2" "$size" "$size"
        for ((i = 0; i < n; i++)); do printf '%s\0' "${parts[i]}"; done
        printf '%s' "$part"
        return
    fi
    size=$(stat -c %s -- "$3")
    size_forked=1
    if [ "$size" -le "$cap" ]; then
        printf 'R %s %s %s %s %s 0\n' "$id" "$1" "$2" "$size" "$size"
        cat -- "$3"
    else
        local h=$((cap / 2)) t=$((cap - cap / 2))
        printf 'R %s %s %s %s %s %s\n' "$id" "$1" "$2" "$size" "$h" "$t"
        head -c "$h" -- "$3"
        tail -c "$t" -- "$3"
    fi
}
printf 'SWERL-READY %s %s\n' "$$" "$d"
while IFS=' ' read -r op id a b c e; do
    case $op in
    X)
        # A fresh output file per command: a background process the last command
        # left running keeps writing to its own file, never into this one.
        ((id % 64 == 0)) && rm -f -- "$d"/out.*
        out="$d/out.$id"
        cwd= cmd= envs=
        [ "$b" -gt 0 ] && IFS= read -r -N "$b" cwd
        [ "$c" -gt 0 ] && IFS= read -r -N "$c" cmd
        [ "$e" -gt 0 ] && IFS= read -r -N "$e" envs
        (
            # The server's LC_ALL=C is not exported when the sandbox had none, so only a
            # sandbox that set one pays for restoring it (bash reloads the locale).
            [ "$_lc" = __swerl_unset__ ] || LC_ALL=$_lc
            if ! cd -- "${cwd:-/}" 2>/dev/null; then
                printf 'swerl: cannot run in %s: no such directory\n' "$cwd" >"$out"
                exit 1
            fi
            eval "$envs"
            [ "$fsize" -gt 0 ] && ulimit -f "$((fsize / 1024))"
            # Under memory pressure the kernel kills the command, not the server.
            echo 1000 2>/dev/null >/proc/self/oom_score_adj
            exec bash -c "$cmd" >"$out" 2>&1 </dev/null 3>&- 4>&- 5>&-
        ) &
        pid=$!
        limit=0
        [ "$a" != 0 ] && limit=$((${a%.*} * 1000000 + 10#${a#*.} * 1000))
        printf 'A %s %s %s\n' "$id" "$pid" "$limit" >&4
        wait "$pid"
        rc=$?
        printf 'D\n' >&4
        # A verdict of an earlier command (its watchdog fired as it ended) is dropped.
        to=0
        while read -r -t 0 -u 3; do
            IFS=' ' read -r -u 3 vid vto
            [ "$vid" = "$id" ] && to=$vto && rc=137
        done
        reply "$rc" "$to" "$out"
        [ -n "$size_forked" ] && rm -f -- "$out"
        ;;
    W)
        path=
        IFS= read -r -N "$a" path
        if [ -n "${path%/*}" ] && [ "${path%/*}" != "$path" ]; then mkdir -p -- "${path%/*}" 2>"$err"; fi
        if : >"$path" 2>"$err"; then
            head -c "$b" >"$path"
            chmod "$c" -- "$path" 2>"$err"
            reply $? 0 /dev/null
        else
            head -c "$b" >/dev/null
            reply 1 0 "$err"
        fi
        ;;
    F)
        path=
        IFS= read -r -N "$a" path
        if [ -f "$path" ] && [ -r "$path" ]; then
            cap=$((1 << 62)) small=65536 reply 0 0 "$path"
        else
            printf 'no such readable file: %s\n' "$path" >"$err"
            reply 1 0 "$err"
        fi
        ;;
    Q)
        exit 0
        ;;
    *)
        printf 'unknown request: %s\n' "$op" >"$err"
        reply 2 0 "$err"
        ;;
    esac
done
"""

INIT_SCRIPT = 'trap "exit 0" TERM INT; sleep "$1" & wait $!'
"""PID 1 of every sandbox (``bash -c INIT_SCRIPT swerl-init LIFETIME``): reaps orphans and
exits when the lifetime is over, so a sandbox left behind ends on its own."""

SERVER_DIED = 3
"""How :data:`ATTACHED_INIT` exits when the command server died (not the lifetime, not a kill)."""
ATTACHED_INIT = (
    'trap "exit 0" TERM INT; sleep "$1" & z=$!; shift; "$@" <&0 & s=$!; exec 0</dev/null; '
    'while kill -0 "$s" 2>/dev/null && kill -0 "$z" 2>/dev/null; do wait -n; done; '
    f'kill -0 "$s" 2>/dev/null && exit 0; exit {SERVER_DIED}'
)
"""PID 1 that runs the command server itself, on the sandbox's own stdin and stdout
(``bash -c ATTACHED_INIT swerl-init LIFETIME SERVER-ARGV...``): a backend that can attach
to its container's main process needs no second process launch (a ``docker exec``) per
sandbox. It reaps orphans like :data:`INIT_SCRIPT` and ends with the lifetime, and it
ends the sandbox with exit code :data:`SERVER_DIED` when the server dies (so the backend
can tell that from a kill), or when the client goes away (the server reads end of file)."""

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def server_command(config: SandboxConfig) -> list[str]:
    """argv that starts the command server inside a sandbox.

    The script itself arrives first on stdin (see ``ShellChannel.handshake``), so
    ``ps`` inside the sandbox shows one short line instead of the whole server.
    """
    loader = f'IFS= read -r -N {len(SERVER_SCRIPT.encode())} s && eval "$s"'
    limits = (config.output_cap, config.max_output, config.max_file_size)
    return ["bash", "-c", loader, "swerl-server", *(str(int(x)) for x in limits)]


def encode_env(env: dict[str, str]) -> bytes:
    """Environment as shell ``export`` lines, evaluated inside the command's subshell."""
    lines = []
    for key, value in env.items():
        if not _ENV_KEY.match(key):
            raise ValueError(f"invalid environment variable name: {key!r}")
        if "\0" in value:
            raise ValueError(f"environment variable {key} contains a NUL byte")
        lines.append(f"export {key}={shlex.quote(value)}\n")
    return "".join(lines).encode()


@dataclass
class Reply:
    returncode: int
    killed: int
    """0: ran to the end; 1: killed at the timeout; 2: killed for writing too much output;
    3: killed by an interrupt."""
    total: int
    head: bytes
    tail: bytes

    @property
    def truncated(self) -> bool:
        return len(self.head) + len(self.tail) < self.total

    def body(self) -> bytes:
        if not self.truncated:
            return self.head + self.tail
        dropped = self.total - len(self.head) - len(self.tail)
        return self.head + f"\n[... swerl: {dropped} bytes of output truncated ...]\n".encode() + self.tail


class ReadBuffer:
    """Bytes received and not yet consumed, read off as lines or exact lengths.

    ``next_chunk`` returns the next bytes of the stream, or raises in its owner's terms
    (a broken channel, a timeout): the framing is shared, the error handling is not.
    """

    def __init__(self, next_chunk: Callable[[], bytes]) -> None:
        self._next_chunk = next_chunk
        self._buf = bytearray()

    def line(self) -> bytes:
        """The next line, without its newline."""
        while (i := self._buf.find(b"\n")) < 0:
            self._buf += self._next_chunk()
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return line

    def exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += self._next_chunk()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class ShellChannel:
    """Client of SERVER_SCRIPT over any duplex byte stream.

    ``send`` writes all bytes; ``recv`` returns the next chunk and ``b""`` at end
    of stream; it may raise ``TimeoutError`` after ``set_timeout`` seconds.
    """

    grace: float = 30.0
    """Seconds past a command's timeout before the client declares the channel dead (the
    server enforces the timeout itself; this only catches a server that cannot answer)."""
    probe_every: float = 10.0
    """Seconds of silence between two ``probe`` calls while waiting for a reply."""
    send_limit: float = 300.0
    """Seconds a request may take to send when it has no deadline of its own."""

    def __init__(
        self,
        send: Callable[[bytes], None],
        recv: Callable[[], bytes],
        set_timeout: Callable[[float | None], None] = lambda _t: None,
        describe: str = "sandbox",
        probe: Callable[[], str | None] | None = None,
    ) -> None:
        self._send = send
        self._recv = recv
        self._set_timeout = set_timeout
        self._probe = probe
        self._in = ReadBuffer(self._next_chunk)
        self._lock = threading.Lock()
        self._ids = 0
        self._broken: str | None = None
        self._deadline: float | None = None
        self._waited_for = ""
        self.describe = describe
        self.server_pid: int | None = None
        self.server_dir: str | None = None
        """The server's directory in the sandbox; ``K`` written into its ``ctl`` interrupts a command."""

    # ----------------------------------------------------------------- framing
    def _next_chunk(self) -> bytes:
        """The next bytes of the stream, by an absolute deadline (a per-read timeout alone
        restarts with every chunk) and asking ``probe`` whether the sandbox still exists
        every ``probe_every`` seconds of silence (a runtime may keep a dead sandbox's
        stream open, and a command without a timeout would otherwise wait forever)."""
        while True:
            left = None if self._deadline is None else self._deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._break(f"no reply from the command server within {self._waited_for}")
            wait = left if self._probe is None else min(left or self.probe_every, self.probe_every)
            self._set_timeout(wait)
            try:
                chunk = self._recv()
            except TimeoutError:
                gone = self._probe() if self._probe is not None else None
                if gone:
                    raise self._break(gone) from None
                continue
            except OSError as e:
                raise self._break(f"channel error: {e}") from e
            if not chunk:
                raise self._break("the command server's channel closed (the sandbox died?)")
            return chunk

    def _wait(self, seconds: float | None, what: str) -> None:
        """Set the deadline of the reply being read: ``seconds`` from now, or none."""
        self._deadline = None if seconds is None else time.monotonic() + seconds
        self._waited_for = what

    def _send_all(self, data: bytes, why: str) -> None:
        left = self.send_limit if self._deadline is None else max(self._deadline - time.monotonic(), 0.001)
        self._set_timeout(left)
        try:
            self._send(data)
        except OSError as e:  # TimeoutError included: a partly sent request breaks the channel
            raise self._break(f"{why}: {e or type(e).__name__}") from e

    def _break(self, why: str) -> SandboxError:
        self._broken = why
        return SandboxError(f"{self.describe}: {why}")

    @property
    def broken(self) -> str | None:
        return self._broken

    # ---------------------------------------------------------------- protocol
    def handshake(self, timeout: float) -> None:
        """Send the server script to the loader and wait until it is ready."""
        self._wait(timeout, f"{timeout:g} s of starting")
        self._send_all(SERVER_SCRIPT.encode(), "cannot send the server script")
        while True:
            line = self._in.line()
            if line.startswith(b"SWERL-READY"):
                fields = line.split()
                self.server_pid = int(fields[1])
                self.server_dir = fields[2].decode() if len(fields) > 2 else None
                return

    def _request(self, header: str, payload: bytes, wait: float | None, what: str) -> Reply:
        if self._broken:
            raise SandboxError(f"{self.describe}: channel unusable: {self._broken}")
        with self._lock:
            self._ids += 1
            rid = self._ids
            self._wait(wait, what)
            self._send_all(
                f"{header.format(id=rid)}\n".encode() + payload, "cannot send to the command server"
            )
            fields = self._in.line().split()
            if len(fields) != 7 or fields[0] != b"R" or int(fields[1]) != rid:
                raise self._break(f"protocol error: unexpected reply {fields[:7]!r}")
            rc, to, total, head, tail = (int(f) for f in fields[2:])
            return Reply(rc, to, total, self._in.exact(head), self._in.exact(tail))

    def execute(
        self, command: str, cwd: str, timeout: float, env: dict[str, str] | None = None
    ) -> ExecResult:
        cmd = command.encode("utf-8", errors="surrogateescape")
        if b"\0" in cmd:
            raise ValueError("command contains a NUL byte, which no shell can run")
        cwd_b = cwd.encode()
        if b"\0" in cwd_b:  # the server reads it with `read -N`, which drops NUL bytes
            raise ValueError("cwd contains a NUL byte, which no path can")
        env_b = encode_env(env or {})
        timeout = max(float(timeout or 0), 0.0)
        t = f"{timeout:.3f}" if timeout else "0"
        header = f"X {{id}} {t} {len(cwd_b)} {len(cmd)} {len(env_b)}"
        start = time.monotonic()
        # The server enforces the timeout; the client waits longer before it
        # declares the channel dead.
        if timeout:
            wait, what = timeout + self.grace, f"the command's {timeout:g} s timeout + {self.grace:g} s"
        else:
            wait, what = None, "(no timeout)"
        reply = self._request(header, cwd_b + cmd + env_b, wait, what)
        return ExecResult(
            raw=reply.body(),
            returncode=reply.returncode,
            duration=time.monotonic() - start,
            timed_out=reply.killed == 1,
            truncated=reply.truncated,
            output_limit=reply.killed == 2,
            interrupted=reply.killed == 3,
        )

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        p = path.encode()
        reply = self._request(f"W {{id}} {len(p)} {len(data)} {mode:o} 0", p + data, 300.0, "300 s")
        if reply.returncode:
            raise OSError(
                f"cannot write {path} in {self.describe}: {reply.body().decode(errors='replace').strip()}"
            )

    def read_file(self, path: str) -> bytes:
        p = path.encode()
        reply = self._request(f"F {{id}} {len(p)} 0 0 0", p, 300.0, "300 s")
        if reply.returncode:
            raise FileNotFoundError(
                f"{path} in {self.describe}: {reply.body().decode(errors='replace').strip()}"
            )
        return reply.body()

    def quit(self) -> None:
        if not self._broken:
            try:
                self._send(b"Q 0 0 0 0 0\n")
            except OSError:
                pass
        self._broken = self._broken or "closed"
