"""Language-model tokens per second, prefill and decode at batch 1: em.models beside transformers on
torch, on the same random checkpoint (saved by transformers, loaded by both) and the same threads.

Usage: python bench/bench_models.py [--threads N] [--model llama|gpt2|both] [--prompt T] [--new N] [--reps N]
Each round times prefill (one forward over the prompt, last logits) and greedy decode of N tokens with
the KV cache, the libraries taking turns; the median over the rounds counts. Ratios above 1: ember faster.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch
import transformers

import ember as em

LLAMA = dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=2048, tie_word_embeddings=False)
GPT2 = dict(vocab_size=50257, n_positions=1024, n_embd=512, n_layer=8, n_head=8)


def build(kind, path):
    torch.manual_seed(0)
    if kind == "llama":
        ref = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
    else:
        ref = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    ref.eval().save_pretrained(path)
    cls = em.models.Llama if kind == "llama" else em.models.GPT2
    return ref, cls.from_pretrained(path)


def time_it(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(kind, args):
    with tempfile.TemporaryDirectory() as tmp:
        ref, model = build(kind, tmp)
        params = sum(p.numel() for p in model.parameters())
        prompt = np.random.default_rng(0).integers(0, 1000, (1, args.prompt))
        tp = torch.from_numpy(prompt)
        mask = torch.ones_like(tp)

        def em_prefill():
            with em.no_grad():
                model._forward(em.tensor(prompt), model.new_cache(1, args.prompt), last_only=True).numpy()

        def th_prefill():
            with torch.no_grad():
                ref(tp, attention_mask=mask, logits_to_keep=1).logits.numpy()

        def em_decode():
            model.generate(prompt, args.new).numpy()

        def th_decode():
            with torch.no_grad():
                ref.generate(tp, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                             do_sample=False, pad_token_id=0)

        # the same tokens: otherwise the two decodes would not be doing the same work
        with torch.no_grad():
            want = ref.generate(tp, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0).numpy()
        assert (model.generate(prompt, 8).numpy() == want).all(), "ember and transformers decode differently"
        rows = []
        for what, fe, ft, tokens in (("prefill", em_prefill, th_prefill, args.prompt),
                                     ("decode", em_decode, th_decode, args.new)):
            fe(), ft()  # warm both
            te, tt = [], []
            for _ in range(args.reps):
                te.append(time_it(fe))
                tt.append(time_it(ft))
            e, t = statistics.median(te), statistics.median(tt)
            rows.append((what, tokens / e, tokens / t, t / e))
        print(f"\n{kind}: {params / 1e6:.1f}M parameters, prompt {args.prompt}, {args.new} new tokens, "
              f"{args.threads} threads")
        print(f"{'':10s}{'ember tok/s':>14s}{'torch tok/s':>14s}{'ratio':>9s}")
        for what, e, t, r in rows:
            print(f"{what:10s}{e:14.1f}{t:14.1f}{r:8.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", choices=["llama", "gpt2", "both"], default="both")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    em.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(f"{platform.processor() or platform.machine()}, ember ISA {em._C.isa()}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    for kind in (["llama", "gpt2"] if args.model == "both" else [args.model]):
        run(kind, args)


if __name__ == "__main__":
    main()
