"""Generate text with a Hugging Face Llama checkpoint: python examples/llama_generate.py DIR "prompt".

DIR holds config.json and model.safetensors (or a sharded index); with tokenizer.json there, the prompt
and the output go through the `tokenizers` package. Without DIR the script makes a tiny random model,
saves it as a checkpoint, loads it back and checks that the KV-cache decode equals full recomputation.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np

import ember as em


def tiny_checkpoint(path):
    """A random 2-layer Llama (GQA, tied embeddings) saved the way transformers saves one."""
    cfg = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, rms_norm_eps=1e-5)
    em.manual_seed(0)
    model = em.models.Llama(cfg)
    em.save_safetensors(model.state_dict(), os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama"), f)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("checkpoint", nargs="?", help="a Hugging Face checkpoint directory")
    ap.add_argument("prompt", nargs="?", default="The capital of France is")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: as stored)")
    ap.add_argument("--device", default=None, help="cpu or metal (default: the default device)")
    ap.add_argument("--quick", action="store_true", help="accepted for the examples runner")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.checkpoint
        if path is None:
            path = tmp
            tiny_checkpoint(path)
        model = em.models.Llama.from_pretrained(path, dtype=args.dtype, device=args.device)
        tok = None
        if os.path.exists(os.path.join(path, "tokenizer.json")):
            from tokenizers import Tokenizer  # optional: only for checkpoints that ship a tokenizer

            tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
            ids = tok.encode(args.prompt).ids
        else:
            ids = list(args.prompt.encode("utf-8")[:32]) if args.checkpoint is None else [1]
        em.manual_seed(0)
        start = time.perf_counter()
        out = model.generate([ids], args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p)
        secs = time.perf_counter() - start
        new = out.numpy()[0, len(ids):].tolist()
        print(tok.decode(new) if tok else new)
        print(f"{len(new)} tokens in {secs:.2f} s ({len(new) / max(secs, 1e-9):.1f} tokens/s)")
        if args.checkpoint is None and args.temperature == 0.0:
            # the cached decode must pick the same tokens as recomputing the whole sequence each step
            full = np.asarray(ids)
            for _ in range(len(new)):
                full = np.append(full, int(model(full[None]).numpy()[0, -1].argmax()))
            assert full[len(ids):].tolist() == new, "KV-cache decode differs from full recomputation"
    print("ok")


if __name__ == "__main__":
    main()
