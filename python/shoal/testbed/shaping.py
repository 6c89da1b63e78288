"""Link parameters (rate, delay, loss) and the `tc` commands that impose them on one veth end.

Every shaped veth end gets the same tree (the recipe Mininet's ``TCLink``
uses, extended with a loss fallback)::

    root 1: htb default 1
     `- class 1:1 htb rate R ceil R          <- the link rate
         `- 10: netem delay D [loss L%]        <- only with a delay or loss, and only if the kernel has netem
     `- class 1:2 -> 20: pfifo limit 0         <- loss without netem: a cBPF filter on 1: sends
                                                  a random fraction L of IP packets here, where they are dropped

HTB counts whole frames (Ethernet header included), so TCP goodput over a
link of rate R is at most R * 1448/1514 (about 95.6% of R) with MTU 1500 and
TCP timestamps.

Kernels built without ``sch_netem`` (CONFIG_NET_SCH_NETEM) cannot delay
packets at all: the rate and the loss are still emulated, the delay is not,
and the testbed records and reports that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

#: Units `tc` accepts for rates, in bits per second (bps etc. are *bytes* per second, as in tc).
_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
    "tbps": 8e12,
}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "ns": 1e-9}
#: Words meaning "no rate limit".
UNLIMITED = ("unlimited", "none", "0")
#: Ethernet frame (as HTB counts it: MAC header, no preamble/FCS) and TCP payload with MTU 1500 and timestamps.
FRAME_BYTES, TCP_PAYLOAD_BYTES = 1514, 1448
#: Packets a shaped link may queue (the veth default txqueuelen): the "switch port buffer".
QUEUE_PACKETS = 1000
#: HTB quantum (bytes): fixed, to avoid the kernel's "quantum is big" warning at high rates.
HTB_QUANTUM = 60000


def parse_rate(text: str) -> int | None:
    """'1gbit' -> 1_000_000_000 bits/s; 'unlimited' -> None. Units as in tc (mbps = megabytes/s)."""
    t = text.strip().lower()
    if t in UNLIMITED:
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-z]*)", t)
    if not m or (m.group(2) or "bit") not in _RATE_UNITS:
        raise ValueError(f"bad rate {text!r}: expected e.g. 1gbit, 200mbit, 100kbit (or 'unlimited')")
    bits = float(m.group(1)) * _RATE_UNITS[m.group(2) or "bit"]
    if bits < 8000:
        raise ValueError(f"rate {text!r} is below 8kbit")
    return int(round(bits))


def parse_delay(text: str) -> float:
    """'50us' -> 5e-05 seconds; a bare number is milliseconds (as in tc/netem)."""
    t = text.strip().lower()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-z]*)", t)
    if not m or (m.group(2) or "ms") not in _TIME_UNITS:
        raise ValueError(f"bad delay {text!r}: expected e.g. 50us, 1ms, 0")
    seconds = round(float(m.group(1)) * _TIME_UNITS[m.group(2) or "ms"], 9)  # whole nanoseconds
    if seconds > 10:
        raise ValueError(f"delay {text!r} is over 10 s")
    return seconds


def parse_loss(text: str) -> float:
    """'0.1%' or '0.1' (percent, as in netem) -> 0.001 (a fraction)."""
    t = text.strip().rstrip("%").strip()
    try:
        percent = float(t)
    except ValueError:
        raise ValueError(f"bad loss {text!r}: expected a percentage, e.g. 0.1%") from None
    if not 0 <= percent < 100 or math.isnan(percent):
        raise ValueError(f"loss {text!r} must be at least 0% and below 100%")
    return round(percent / 100, 12)


def format_rate(bits: int | None) -> str:
    """1_000_000_000 -> '1gbit' (the shortest exact tc spelling); None -> 'unlimited'."""
    if bits is None:
        return "unlimited"
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale and bits % scale == 0:
            return f"{bits // int(scale)}{unit}"
    return f"{bits}bit"


def format_delay(seconds: float) -> str:
    """5e-05 -> '50us' (tc spelling, microsecond resolution)."""
    us = round(seconds * 1e6)
    if us == 0:
        return "0"
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def format_loss(fraction: float) -> str:
    """0.001 -> '0.1%'."""
    return f"{fraction * 100:.6g}%"


@dataclass(frozen=True)
class Link:
    """The parameters of every host link, each applied to both directions.

    `delay` is the one-way delay of one link (host <-> switch): a packet from
    one host to another crosses two links, so its one-way delay is
    ``2 * delay`` and the round trip between two hosts ``4 * delay``.
    `loss` is the fraction of packets each link direction drops, so a
    host-to-host packet is lost with probability ``1 - (1 - loss)**2``.
    """

    rate_bps: int | None
    delay_s: float = 0.0
    loss: float = 0.0

    @classmethod
    def parse(cls, rate: str, delay: str = "0", loss: str = "0") -> Link:
        return cls(parse_rate(rate), parse_delay(delay), parse_loss(loss))

    def describe(self) -> str:
        parts = [format_rate(self.rate_bps), f"delay {format_delay(self.delay_s)}"]
        if self.loss:
            parts.append(f"loss {format_loss(self.loss)}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "rate_bps": self.rate_bps,
            "delay_s": round(self.delay_s, 9),
            "loss": round(self.loss, 12),
            "rate": format_rate(self.rate_bps),
            "delay": format_delay(self.delay_s),
            "loss_percent": format_loss(self.loss),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Link:
        rate = data.get("rate_bps")
        return cls(
            None if rate is None else int(rate),  # type: ignore[call-overload]
            float(data.get("delay_s", 0.0)),  # type: ignore[arg-type]
            float(data.get("loss", 0.0)),  # type: ignore[arg-type]
        )

    def expected_goodput_bps(self) -> float | None:
        """The best TCP goodput over one link (MTU 1500, timestamps on): the rate less framing."""
        return None if self.rate_bps is None else self.rate_bps * TCP_PAYLOAD_BYTES / FRAME_BYTES


@dataclass(frozen=True)
class Capabilities:
    """What the kernel can do for the shaping: netem (delay and loss), a cBPF classifier (loss without netem)."""

    netem: bool
    cbpf: bool = True

    def emulated(self, link: Link) -> dict[str, str]:
        """How each requested link parameter is emulated, or 'not emulated (...)'."""
        out = {"rate": "htb" if link.rate_bps is not None else "unlimited"}
        if link.delay_s:
            out["delay"] = "netem" if self.netem else "NOT emulated (this kernel has no sch_netem)"
        if link.loss:
            out["loss"] = "netem" if self.netem else ("cbpf random drop" if self.cbpf else "NOT emulated")
        return out


#: Runs a `tc` command (its arguments after `tc -n NS`) in a namespace; raises on failure.
TcRunner = Callable[[str, list[str]], None]


def htb_burst(rate_bps: int) -> int:
    """Bytes HTB may send back to back: 15 KB (Mininet's choice) or 100 us at the rate, whichever is larger."""
    return max(15000, rate_bps // 8 // 10000)


def cbpf_loss_program(loss: float, drop_class: int = 0x10002) -> str:
    """A classic-BPF program in tc's ``bytecode`` syntax returning `drop_class` for a random fraction `loss`.

    ``ld rand`` (the SKF_AD_RANDOM ancillary load) gives a uniform 32-bit
    number; below ``loss * 2**32`` the packet is classified to `drop_class`,
    otherwise the program returns 0 ("no match", the qdisc's default class).
    """
    threshold = min(2**32 - 1, int(round(loss * 2**32)))
    ld_rand = f"32 0 0 {(-0x1000 + 56) & 0xFFFFFFFF}"  # BPF_LD|BPF_W|BPF_ABS, k = SKF_AD_OFF + SKF_AD_RANDOM
    jge = f"53 0 1 {threshold}"  # BPF_JMP|BPF_JGE|BPF_K: A >= threshold -> next (keep), else skip one (drop)
    return f"4,{ld_rand},{jge},6 0 0 0,6 0 0 {drop_class}"


def shape_commands(dev: str, link: Link, caps: Capabilities) -> list[list[str]]:
    """The `tc` commands (without ``tc -n NS``) that shape the egress of `dev` as `link` says."""
    use_netem = caps.netem and (link.delay_s > 0 or link.loss > 0)
    cbpf_loss = link.loss > 0 and not caps.netem and caps.cbpf
    if link.rate_bps is None and not use_netem and not cbpf_loss:
        return []
    # An "unlimited" link still needs a classful root for the loss fallback: 100 Gbit/s is beyond any veth here.
    rate = link.rate_bps if link.rate_bps is not None else 100 * 10**9
    burst = htb_burst(rate)
    htb_class = ["htb", "rate", f"{rate}bit", "ceil", f"{rate}bit"]
    htb_class += ["burst", str(burst), "cburst", str(burst), "quantum", str(HTB_QUANTUM)]
    cmds = [
        ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
        ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", *htb_class],
    ]
    if use_netem:
        netem = ["netem", "limit", str(QUEUE_PACKETS)]
        if link.delay_s > 0:
            netem += ["delay", f"{round(link.delay_s * 1e6)}us"]
        if link.loss > 0:
            netem += ["loss", f"{link.loss * 100:.6g}%"]
        cmds.append(["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *netem])
    elif cbpf_loss:
        cmds += [
            ["class", "add", "dev", dev, "parent", "1:", "classid", "1:2", *htb_class],
            ["qdisc", "add", "dev", dev, "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"],
            # protocol ip only: ARP is never lost, so a loss never turns into a resolution timeout.
            ["filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1"]
            + ["bpf", "bytecode", cbpf_loss_program(link.loss)],
        ]
    return cmds
