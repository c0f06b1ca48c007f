#!/usr/bin/env python3
"""PSNR between clips written as Y4M (`autooptim generate --out clip.y4m`; the device build has no PNG
writer): per frame over all the bytes of its Y, U and V planes (4:4:4 or 4:2:0), then the mean over frames (the gate
takes the mean over frames too, of RGB PSNR), with the worst frame beside it.
  clip_psnr.py REF.y4m CLIP.y4m...   one line per clip: mean and worst-frame PSNR against REF, in dB"""
import math
import pathlib
import sys

import numpy as np

CAP = 100.0  # the gate's cap for identical frames


def frames(path):
    data = pathlib.Path(path).read_bytes()
    head_end = data.index(b"\n")
    head = data[:head_end].split()
    if head[0] != b"YUV4MPEG2":
        sys.exit(f"clip_psnr: {path} is not a Y4M file")
    w = int(next(t[1:] for t in head if t.startswith(b"W")))
    h = int(next(t[1:] for t in head if t.startswith(b"H")))
    chroma = next((t[1:] for t in head if t.startswith(b"C")), b"420jpeg")
    if chroma.startswith(b"444"):
        size = 3 * w * h
    elif chroma.startswith(b"420"):
        size = w * h + 2 * ((w + 1) // 2) * ((h + 1) // 2)
    else:
        sys.exit(f"clip_psnr: {path}: colour space C{chroma.decode()} (only 444 and 420)")
    out, pos = [], head_end + 1
    while pos < len(data):
        eol = data.index(b"\n", pos)
        if not data[pos:eol].startswith(b"FRAME"):
            sys.exit(f"clip_psnr: {path}: no FRAME header at byte {pos}")
        pos = eol + 1
        if pos + size > len(data):
            sys.exit(f"clip_psnr: {path} is truncated in frame {len(out)}")
        out.append(np.frombuffer(data, np.uint8, size, pos).astype(np.float64))
        pos += size
    if not out:
        sys.exit(f"clip_psnr: {path} has no frames")
    return out


def psnr(a, b):
    mse = float(np.mean((a - b) ** 2))
    return CAP if mse <= 0 else min(CAP, 10 * math.log10(255.0 ** 2 / mse))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ref = frames(sys.argv[1])
    for path in sys.argv[2:]:
        clip = frames(path)
        if len(clip) != len(ref) or clip[0].size != ref[0].size:
            sys.exit(f"clip_psnr: {path} has {len(clip)} frames of {clip[0].size} bytes, the reference {len(ref)} of {ref[0].size}")
        p = [psnr(c, r) for c, r in zip(clip, ref)]
        same = all(np.array_equal(c, r) for c, r in zip(clip, ref))
        print(f"{pathlib.Path(path).stem:>24} vs {pathlib.Path(sys.argv[1]).stem}: mean {sum(p) / len(p):6.2f} dB, "
              f"worst frame {min(p):6.2f} dB{', bit-identical' if same else ''}")


if __name__ == "__main__":
    main()
