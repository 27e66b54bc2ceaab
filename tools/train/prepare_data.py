"""Builds the ds4-nano text corpus (docs/nano.md): public-domain texts from
../shared/testdata/text and three Debian packages, each split into a training part and a
held-out part (the last 10% by bytes, cut at a line boundary; never trained on).

    apt-get install bible-kjv jargon-text dict-devil
    python3 tools/train/prepare_data.py --shared ../shared/testdata/text -o build/nano-data
    build/ds4-tokenize --vocab models/deepseek-v3-tokenizer.json.zst -o build/nano-data/tok \
        build/nano-data/train/*.txt build/nano-data/heldout/*.txt   # (two folders: see below)

Writes <out>/train/<name>.txt and <out>/heldout/<name>.txt.
"""

import argparse
import gzip
import os
import subprocess
import sys

HELDOUT_FRACTION = 0.10


def sources(shared):
    """name -> UTF-8 text."""
    out = {}
    for name in ("promessi_sposi", "tiny_shakespeare"):
        with open(os.path.join(shared, name + ".txt"), encoding="utf-8") as f:
            out[name] = f.read()
    out["bible_kjv"] = subprocess.run(["bible", "-p", "/usr/lib", "gen1:1-rev22:21"], check=True,
                                      capture_output=True).stdout.decode("utf-8")
    with gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8", errors="replace") as f:
        out["jargon"] = f.read()
    with gzip.open("/usr/share/dictd/devil.dict.dz", "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    start = text.find("THE DEVIL'S DICTIONARY")       # drop the dictd database header
    out["devils_dictionary"] = text[start:] if start >= 0 else text
    return out


def split(text):
    """(train, heldout): held-out = the last 10% by bytes, starting at a line boundary."""
    data = text.encode("utf-8")
    cut = int(len(data) * (1.0 - HELDOUT_FRACTION))
    nl = data.find(b"\n", cut)
    cut = len(data) if nl < 0 else nl + 1
    return data[:cut].decode("utf-8"), data[cut:].decode("utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", required=True, help="folder with promessi_sposi.txt, tiny_shakespeare.txt")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    for part in ("train", "heldout"):
        os.makedirs(os.path.join(a.out, part), exist_ok=True)
    for name, text in sources(a.shared).items():
        tr, ho = split(text)
        for part, t in (("train", tr), ("heldout", ho)):
            with open(os.path.join(a.out, part, name + ".txt"), "w", encoding="utf-8") as f:
                f.write(t)
        print("%-18s train %8d bytes, held-out %7d bytes" % (name, len(tr.encode()), len(ho.encode())), file=sys.stderr)


if __name__ == "__main__":
    main()
