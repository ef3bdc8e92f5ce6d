#!/usr/bin/env python3
"""Text files -> a byte-level BPE tokenizer and llm.c token shards for `moezero train`.

    scripts/prepare_data.py TEXT... --vocab-size N --out DIR [--val-fraction F]

Trains a GPT-2 style byte-level BPE tokenizer (Hugging Face `tokenizers`, pinned in
scripts/python_requirements.txt; nothing is downloaded) on the files, with one special token
<|endoftext|> (id 0) that starts every document (each file is a document, as llm.c does), and
writes DIR/tokenizer.json, DIR/train_000000.bin and DIR/val_000000.bin (the last F of the
tokens, default 0.05) in llm.c's shard layout (uint16 ids when N <= 65536, else uint32), then
prints the `moezero train` settings that use them.
"""
import argparse
import os
import struct
import sys


def write_shard(path, ids, vocab_size):
    wide = vocab_size > 65536
    header = [0] * 256
    header[0], header[1], header[2] = (20240801, 7, len(ids)) if wide else (20240520, 1, len(ids))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%d%s" % (len(ids), "I" if wide else "H"), *ids))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("texts", nargs="+", help="UTF-8 text files (each one a document)")
    ap.add_argument("--vocab-size", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    a = ap.parse_args()
    if a.vocab_size < 257:
        sys.exit("prepare_data: --vocab-size must be >= 257 (256 bytes + <|endoftext|>), got %d" % a.vocab_size)
    if not 0.0 <= a.val_fraction < 1.0:
        sys.exit("prepare_data: --val-fraction must be in [0, 1), got %g" % a.val_fraction)
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        sys.exit("prepare_data: the Python package 'tokenizers' is missing: run "
                 "scripts/install_python_deps.sh and use build/pyenv/bin/python")
    docs = []
    for path in a.texts:
        try:
            with open(path, encoding="utf-8") as f:
                docs.append(f.read())
        except (OSError, UnicodeDecodeError) as e:
            sys.exit("prepare_data: cannot read %s as UTF-8 text: %s" % (path, e))
    eot = "<|endoftext|>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, special_tokens=[eot],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    eot_id = tok.token_to_id(eot)
    ids = []
    for d in docs:
        ids.append(eot_id)
        ids.extend(tok.encode(d).ids)
    held = int(len(ids) * a.val_fraction)
    train, val = ids[: len(ids) - held], ids[len(ids) - held:]
    os.makedirs(a.out, exist_ok=True)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    write_shard(os.path.join(a.out, "train_000000.bin"), train, vocab)
    if val:
        write_shard(os.path.join(a.out, "val_000000.bin"), val, vocab)
    print("prepare_data: %d documents, %d tokens (%d train, %d held out), vocabulary %d -> %s"
          % (len(docs), len(ids), len(train), len(val), vocab, a.out))
    print("train with: --set model.vocab_size=%d --set data.format=tokens "
          "--set data.path=%s --set data.val_path=%s --set data.tokenizer=%s"
          % (vocab, os.path.join(a.out, "train_000000.bin"), os.path.join(a.out, "val_000000.bin"),
             os.path.join(a.out, "tokenizer.json")))


if __name__ == "__main__":
    main()
