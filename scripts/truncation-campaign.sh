#!/usr/bin/env bash
# Truncation campaign of `accio recover` (issue 29): closed container files cut at many
# points of every offset class (file header, block header, payload, padding, hole, index,
# trailer), each then recovered and verified. Passes when, for every cut,
#   recover exits 0  =>  verify exits 0 and lists every block that was whole before the cut
#   recover exits !0 =>  the file is byte for byte as it was (sha256 before and after).
#
# Usage: scripts/truncation-campaign.sh [ACCIO] [CUTS]   (defaults: target/release/accio, 600)
# Needs python3 (the sample files are written by the embedded generator, which follows
# docs/FORMAT.md). Prints one line per offset class and a total; exits 1 on any violation.
set -euo pipefail
cd "$(dirname "$0")/.."
accio="${1:-target/release/accio}"
cuts="${2:-600}"
test -x "$accio" || { echo "truncation-campaign: no executable $accio (cargo build --release -p accio-cli)"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ACCIO="$(realpath "$accio")" CUTS="$cuts" WORK="$work" python3 - <<'EOF'
import hashlib, os, random, subprocess, sys

def crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t
T = crc_table()
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def le32(v): return v.to_bytes(4, "little")
def le64(v): return v.to_bytes(8, "little")
def up(x, a): return (x + a - 1) // a * a
def seal(h): return h[:60] + le32(crc32c(h[:60]))

def container(align, blocks):
    """A closed container: blocks = [(producer, seq, kind, payload)]; kind 3 = hole of len bytes.
    Returns (bytes, layout) where layout lists (class, start, end) ranges."""
    out = bytearray(seal(b"ACCIOMF\x01" + le32(1) + le32(64) + le32(align) + bytes(4) + le64(1) + bytes(32)))
    out += bytes(up(64, align) - 64)
    layout = [("file-header", 0, 64), ("header-padding", 64, up(64, align))]
    entries = []
    for p, seq, kind, payload in blocks:
        b = len(out)
        n = len(payload)
        crc = 0 if kind == 3 else crc32c(payload)
        h = seal(b"ACCIOBLK" + le32(p) + bytes([kind]) + bytes(3) + le64(seq) + le64(n) + le32(crc) + bytes(24))
        out += h + bytes(up(64, align) - 64)
        pay = len(out)
        out += payload + bytes(up(n, align) - n)
        if kind == 3:
            layout.append(("hole", b, len(out)))
            continue
        layout += [("block-header", b, b + 64), ("block-header-padding", b + 64, pay),
                   ("payload", pay, pay + n), ("payload-padding", pay + n, len(out))]
        entries.append((p, kind, seq, b, n, crc, pay + n))
    idx = bytearray(b"ACCIOIDX" + le64(len(entries)) + le32(48) + bytes(12))
    for p, kind, seq, b, n, crc, _ in entries:
        idx += le32(p) + bytes([kind]) + bytes(3) + le64(seq) + le64(b) + le64(n) + le32(crc) + bytes(12)
    at = len(out)
    layout.append(("index", at, at + len(idx)))
    out += idx
    layout.append(("trailer", len(out), len(out) + 64))
    out += seal(b"ACCIOEND" + le64(at) + le64(len(idx)) + le64(len(entries)) + le32(crc32c(idx)) + le32(1) + bytes(20))
    return bytes(out), layout, entries

rng = random.Random(29)
def payload(n, s): return bytes((i * 31 + s) & 0xFF for i in range(n))
samples = []
# The issue's example first: a 15610-byte block at 0x1000 (align 4096), then assorted ones.
blocks, seqs = [], {}
for i, (p, n) in enumerate([(0, 15610), (1, 0), (2, 1), (0, 4096), (1, 4097), (2, 70000), (0, 63), (1, 100)]):
    blocks.append((p, seqs.setdefault(p, 0), 1 if p == 1 else 0, payload(n, i)))
    seqs[p] += 1
    if i == 3:
        blocks.append((0xFFFFFFFF, 0, 3, bytes(4096 * 2 - 4096 + 4096)))
samples.append(("align4096",) + container(4096, blocks))
blocks, seqs = [], {}
for i in range(40):
    p = i % 3
    blocks.append((p, seqs.setdefault(p, 0), 0, payload(rng.choice([0, 1, 50, 63, 64, 65, 300, 1000]), i)))
    seqs[p] += 1
    if i == 20:
        blocks.append((0xFFFFFFFF, 0, 3, bytes(128)))
samples.append(("align64",) + container(64, blocks))

accio, work, total = os.environ["ACCIO"], os.environ["WORK"], int(os.environ["CUTS"])
def run(*args):
    return subprocess.run([accio, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()

# Cut points: both ends and a random sample inside every range of every class.
cutlist = []
for name, img, layout, entries in samples:
    for cls, a, b in layout:
        if b <= a:
            continue
        pts = {a, b - 1, (a + b) // 2}
        cutlist += [(name, img, entries, cls, c) for c in sorted(pts)]
per = max(1, (total - len(cutlist)) // sum(len(l) for _, _, l, _ in samples))
for name, img, layout, entries in samples:
    for cls, a, b in layout:
        for _ in range(per):
            if b > a:
                cutlist.append((name, img, entries, cls, rng.randrange(a, b)))
# The issue's example cut.
cutlist.append(("align4096", samples[0][1], samples[0][3], "payload-padding", 23902))
stats, bad = {}, []
f = os.path.join(work, "f.accio")
for name, img, entries, cls, cut in cutlist:
    open(f, "wb").write(img)
    os.truncate(f, cut)
    before = sha(f)
    rec = run("recover", f)
    st = stats.setdefault(cls, [0, 0, 0])
    st[0] += 1
    if rec.returncode == 0:
        st[1] += 1
        ver = run("verify", f)
        whole = sum(1 for e in entries if e[6] <= cut)
        want = f", {whole} block(s)"
        if ver.returncode != 0 or want not in ver.stdout:
            bad.append(f"{name} cut {cut} ({cls}): recover exit 0, verify exit {ver.returncode}, "
                       f"expected {want}: {ver.stdout.strip()} {ver.stderr.strip()}")
    else:
        st[2] += 1
        if sha(f) != before:
            bad.append(f"{name} cut {cut} ({cls}): recover exit {rec.returncode} changed the file: {rec.stderr.strip()}")
print(f"{'offset class':<22} {'cuts':>5} {'recovered':>9} {'refused':>7}")
for cls, (n, ok, no) in sorted(stats.items()):
    print(f"{cls:<22} {n:>5} {ok:>9} {no:>7}")
n = sum(s[0] for s in stats.values())
print(f"total: {n} cuts, {sum(s[1] for s in stats.values())} recovered (each verified whole with every "
      f"whole block), {sum(s[2] for s in stats.values())} refused (each left unchanged), {len(bad)} violation(s)")
for b in bad[:20]:
    print("VIOLATION:", b)
sys.exit(1 if bad else 0)
EOF
