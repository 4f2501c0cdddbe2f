"""P_SAMPLE's P status: the runtime's _P* constants (Header.p_status) to the model's PState."""

from __future__ import annotations

from gmpmon.model.snapshot import PState

P_UNKNOWN, P_RUNNING, P_SEARCHING, P_IDLE, P_SYSCALL, P_GCSTOP = (int(s) for s in PState)

# The runtime's _P* constants without the prefix (BinaryInfo.p_status, Header.p_status).
# Recordings made before this spelling carry "_Pidle"...: the decoder strips the prefix.
P_SAMPLE_STATUS_NAMES = ("idle", "running", "syscall", "gcstop", "dead")


def p_status_decoder(names: tuple[str, ...]) -> dict[int, int]:
    to_state = {"idle": P_IDLE, "running": P_RUNNING, "syscall": P_SYSCALL, "gcstop": P_GCSTOP,
                "dead": -1}
    table = names if names else P_SAMPLE_STATUS_NAMES
    return {
        i: to_state.get(n[2:] if n.startswith("_P") else n, P_UNKNOWN)
        for i, n in enumerate(table)
    }
