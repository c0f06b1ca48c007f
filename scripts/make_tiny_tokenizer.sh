#!/usr/bin/env bash
# Regenerates assets/wan22-tiny/spiece.model, the tiny stand-in for umt5-xxl's tokenizer used by the
# tests and the tiny pipeline: a SentencePiece unigram model trained on assets/wan22-tiny/corpus.txt
# with T5's special-token conventions (pad 0, </s> 1, <unk> 2, no BOS).
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/assets/wan22-tiny"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Relative paths: the trainer spec stored in the model records them, and this keeps the output byte-stable.
cp "$dir/corpus.txt" "$tmp/corpus.txt"
cd "$tmp"
spm_train \
  --input=corpus.txt \
  --model_prefix=spiece \
  --model_type=unigram \
  --vocab_size=512 \
  --character_coverage=1.0 \
  --pad_id=0 --pad_piece='<pad>' \
  --eos_id=1 --eos_piece='</s>' \
  --unk_id=2 --unk_piece='<unk>' \
  --bos_id=-1 \
  --num_threads=1 \
  --seed_sentencepiece_size=100000 \
  --minloglevel=1
cp "$tmp/spiece.model" "$dir/spiece.model"
echo "wrote $dir/spiece.model"
