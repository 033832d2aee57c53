"""A tiny pure-Python PNG bar chart (zlib + struct, a built-in 5x7 font; no matplotlib).

``draw(panels, path)``: each panel is ``(title, [(label, value, value_text, highlight), ...],
log_scale)``; bars are horizontal, every panel has its own scale.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

# 5x7 glyphs, one int per row (bit 4 = leftmost column). Upper case only; text is upper-cased.
FONT: dict[str, tuple[int, ...]] = {
    " ": (0, 0, 0, 0, 0, 0, 0),
    "0": (14, 17, 19, 21, 25, 17, 14),
    "1": (4, 12, 4, 4, 4, 4, 14),
    "2": (14, 17, 1, 2, 4, 8, 31),
    "3": (31, 2, 4, 2, 1, 17, 14),
    "4": (2, 6, 10, 18, 31, 2, 2),
    "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14),
    "7": (31, 1, 2, 4, 8, 8, 8),
    "8": (14, 17, 17, 14, 17, 17, 14),
    "9": (14, 17, 17, 15, 1, 2, 12),
    "A": (14, 17, 17, 17, 31, 17, 17),
    "B": (30, 17, 17, 30, 17, 17, 30),
    "C": (14, 17, 16, 16, 16, 17, 14),
    "D": (28, 18, 17, 17, 17, 18, 28),
    "E": (31, 16, 16, 30, 16, 16, 31),
    "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15),
    "H": (17, 17, 17, 31, 17, 17, 17),
    "I": (14, 4, 4, 4, 4, 4, 14),
    "J": (7, 2, 2, 2, 2, 18, 12),
    "K": (17, 18, 20, 24, 20, 18, 17),
    "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17),
    "N": (17, 17, 25, 21, 19, 17, 17),
    "O": (14, 17, 17, 17, 17, 17, 14),
    "P": (30, 17, 17, 30, 16, 16, 16),
    "Q": (14, 17, 17, 17, 21, 18, 13),
    "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30),
    "T": (31, 4, 4, 4, 4, 4, 4),
    "U": (17, 17, 17, 17, 17, 17, 14),
    "V": (17, 17, 17, 17, 17, 10, 4),
    "W": (17, 17, 17, 21, 21, 21, 10),
    "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 17, 10, 4, 4, 4),
    "Z": (31, 1, 2, 4, 8, 16, 31),
    ".": (0, 0, 0, 0, 0, 12, 12),
    ",": (0, 0, 0, 0, 12, 4, 8),
    "-": (0, 0, 0, 31, 0, 0, 0),
    "_": (0, 0, 0, 0, 0, 0, 31),
    "/": (0, 1, 2, 4, 8, 16, 0),
    ":": (0, 12, 12, 0, 12, 12, 0),
    "(": (2, 4, 8, 8, 8, 4, 2),
    ")": (8, 4, 2, 2, 2, 4, 8),
    "%": (24, 25, 2, 4, 8, 19, 3),
    "=": (0, 0, 31, 0, 31, 0, 0),
    "+": (0, 4, 4, 31, 4, 4, 0),
    "'": (4, 4, 8, 0, 0, 0, 0),
    "<": (2, 4, 8, 16, 8, 4, 2),
    ">": (8, 4, 2, 1, 2, 4, 8),
    "?": (14, 17, 1, 2, 4, 0, 4),
    "#": (10, 10, 31, 10, 31, 10, 10),
}

WHITE = (255, 255, 255)
BLACK = (30, 30, 30)
GREY = (150, 150, 150)
LIGHT = (225, 225, 225)
BLUE = (40, 110, 200)
ORANGE = (230, 140, 40)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: tuple[int, int, int]) -> None:
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.w, x + w), min(self.h, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            i = (yy * self.w + x0) * 3
            self.px[i : i + len(row)] = row

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> int:
        """Draw `s`; returns the x after it."""
        for ch in s.upper():
            glyph = FONT.get(ch, FONT["?"])
            for r, bits in enumerate(glyph):
                for c in range(5):
                    if bits & (16 >> c):
                        self.rect(x + c * scale, y + r * scale, scale, scale, color)
            x += 6 * scale
        return x

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


Bar = tuple[str, float, str, bool]
Panel = tuple[str, Sequence[Bar], bool]


def draw(panels: Sequence[Panel], path: str, title: str = "", width: int = 1000) -> None:
    label_w, bar_h, gap, pad = 330, 20, 6, 16
    height = pad + (30 if title else 0)
    for _, bars, _ in panels:
        height += 28 + len(bars) * (bar_h + gap) + pad
    c = Canvas(width, height)
    y = pad
    if title:
        c.text(pad, y, title, BLACK, 2)
        y += 30
    max_bar = width - label_w - pad - 200
    for ptitle, bars, log_scale in panels:
        c.text(pad, y, ptitle, BLUE, 2)
        y += 24
        vals = [b[1] for b in bars if b[1] and b[1] > 0]
        top = max(vals) if vals else 1.0

        def scale(v: float, top: float = top, log_scale: bool = log_scale) -> int:
            if v is None or v <= 0:
                return 0
            if log_scale:
                return int(max_bar * math.log10(1 + v) / math.log10(1 + top))
            return int(max_bar * v / top)

        c.rect(label_w, y - 2, 1, len(bars) * (bar_h + gap), GREY)
        for label, value, vtext, hi in bars:
            c.text(pad, y + 3, label[:26], BLACK, 2)
            n = scale(value)
            c.rect(label_w + 1, y, max(n, 1), bar_h, BLUE if hi else ORANGE)
            c.text(label_w + n + 8, y + 3, vtext, BLACK, 2)
            y += bar_h + gap
        y += pad
        c.rect(pad, y - pad // 2, width - 2 * pad, 1, LIGHT)
    with open(path, "wb") as fh:
        fh.write(c.png())
