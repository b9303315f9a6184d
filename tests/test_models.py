"""em.models against transformers (the reference implementation): Llama (GQA, tied embeddings, llama3
rope scaling, biases) and GPT-2 (Conv1D layout) built with random weights by transformers, saved with
save_pretrained and loaded with from_pretrained: logits, greedy generation, one fine-tuning step's
gradients, checkpoints transformers reads back, sharded indexes, sampling and bad input."""
import json
import os

import numpy as np
import pytest
import torch

import ember as em

transformers = pytest.importorskip("transformers", reason="transformers is a test extra (pip install '.[test]')")

LLAMA_TIED_GQA = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, rms_norm_eps=1e-5,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
LLAMA_UNTIED_BIAS = dict(vocab_size=89, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                         num_attention_heads=3, num_key_value_heads=3, max_position_embeddings=128,
                         tie_word_embeddings=False, attention_bias=True, mlp_bias=True, rope_theta=500.0)
GPT2_CFG = dict(vocab_size=97, n_positions=64, n_embd=48, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
GPT2_INV_IDX = dict(GPT2_CFG, scale_attn_by_inverse_layer_idx=True, activation_function="gelu")


def _randomise(model, seed):
    """transformers initialises norms to ones and biases to zeros: draw every parameter so those are tested too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if p.ndim == 1 else 0.0))
    return model


def _save(tmp_path_factory, name, build, seed):
    path = tmp_path_factory.mktemp(name)
    model = _randomise(build(), seed).eval()
    model.save_pretrained(str(path))
    return str(path), model


@pytest.fixture(scope="module")
def llama_tied(tmp_path_factory):
    return _save(tmp_path_factory, "llama_tied", lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**LLAMA_TIED_GQA)), 1)


@pytest.fixture(scope="module")
def llama_bias(tmp_path_factory):
    return _save(tmp_path_factory, "llama_bias", lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**LLAMA_UNTIED_BIAS)), 2)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return _save(tmp_path_factory, "gpt2", lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**GPT2_CFG)), 3)


@pytest.fixture(scope="module")
def gpt2_inv(tmp_path_factory):
    return _save(tmp_path_factory, "gpt2_inv", lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**GPT2_INV_IDX)), 4)


CASES = [("llama_tied", em.models.Llama), ("llama_bias", em.models.Llama), ("gpt2", em.models.GPT2),
         ("gpt2_inv", em.models.GPT2)]


def _ref_logits(model, ids):
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.numpy()


@pytest.mark.parametrize("name,cls", CASES)
def test_logits_match_transformers(request, name, cls, rng, device):
    path, ref = request.getfixturevalue(name)
    model = cls.from_pretrained(path, device=device)
    assert model.device == device and not model.training
    ids = rng.integers(0, ref.config.vocab_size, (2, 23))
    out = model(ids)
    assert out.shape == (2, 23, ref.config.vocab_size) and out.dtype == em.float32
    np.testing.assert_allclose(out.numpy(), _ref_logits(ref, ids), rtol=1e-4, atol=1e-4)
    # a 1-D prompt gives (T, vocab)
    np.testing.assert_allclose(model(ids[0]).numpy(), out.numpy()[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,cls", CASES)
def test_greedy_generation_matches_transformers(request, name, cls, rng, device):
    path, ref = request.getfixturevalue(name)
    model = cls.from_pretrained(path, device=device)
    prompt = rng.integers(0, ref.config.vocab_size, (2, 6))
    with torch.no_grad():
        want = ref.generate(torch.from_numpy(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                            max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None).numpy()
    got = model.generate(prompt, 12)
    assert got.dtype == em.int64 and got.shape == (2, 18)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(model.generate(prompt[1], 12).numpy(), want[1])


@pytest.mark.parametrize("name,cls", CASES)
def test_one_finetuning_step_matches_torch_gradients(request, name, cls, rng, device):
    path, ref = request.getfixturevalue(name)
    model = cls.from_pretrained(path, device=device).train()
    ref = ref.train()
    for m in ref.modules():  # dropout off on both sides: the gradients must be comparable
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    for m in model.modules():
        if isinstance(m, em.nn.Dropout):
            m.p = 0.0
    ids = rng.integers(0, ref.config.vocab_size, (2, 12))
    targets = rng.integers(0, ref.config.vocab_size, (2, 12))
    logits = model(ids)
    loss = em.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), em.tensor(targets.reshape(-1), device=device))
    grads = loss.backward()
    ref.zero_grad()
    tl = torch.nn.functional.cross_entropy(ref(torch.from_numpy(ids)).logits.reshape(-1, logits.shape[-1]),
                                           torch.from_numpy(targets.reshape(-1)))
    tl.backward()
    np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
    ref_params = dict(ref.named_parameters())
    names = [n for n, _ in model.named_parameters()]
    assert set(names) == set(ref_params), set(names) ^ set(ref_params)
    for n, p in model.named_parameters():
        want = ref_params[n].grad.numpy()
        got = grads[p].numpy()
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-5 * max(1.0, float(np.abs(want).max())),
                                   err_msg=n)
    # one SGD step moves every parameter by -lr * grad, as torch's would
    before = {n: p.numpy().copy() for n, p in model.named_parameters()}
    em.optim.SGD(model.parameters(), lr=0.1).step(grads)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p.numpy(), before[n] - 0.1 * ref_params[n].grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,cls", CASES)
def test_state_dict_saves_a_checkpoint_transformers_loads(request, name, cls, rng, tmp_path):
    path, ref = request.getfixturevalue(name)
    model = cls.from_pretrained(path)
    model.model.norm.weight.set(model.model.norm.weight * 1.5) if cls is em.models.Llama else \
        model.transformer.ln_f.weight.set(model.transformer.ln_f.weight * 1.5)
    out = tmp_path / "out"
    out.mkdir()
    em.save_safetensors(model.state_dict(), out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(ref.config.to_dict()))
    back = type(ref).from_pretrained(str(out)).eval()
    ids = rng.integers(0, ref.config.vocab_size, (1, 9))
    np.testing.assert_allclose(_ref_logits(back, ids), model(ids).numpy(), rtol=1e-4, atol=1e-4)
    tied = ref.config.tie_word_embeddings
    assert ("lm_head.weight" in model.state_dict()) == (not tied)


def test_sharded_checkpoint_loads(llama_bias, tmp_path, rng):
    path, ref = llama_bias
    state = em.load_safetensors(os.path.join(path, "model.safetensors"))
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in shards.items():
        em.save_safetensors({k: state[k] for k in keys}, tmp_path / fname)
        weight_map.update({k: fname for k in keys})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    model = em.models.Llama.from_pretrained(tmp_path)
    ids = rng.integers(0, ref.config.vocab_size, (1, 7))
    np.testing.assert_allclose(model(ids).numpy(), _ref_logits(ref, ids), rtol=1e-4, atol=1e-4)
    # an index that points outside its directory is refused
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {names[0]: "../x.safetensors"}}))
    with pytest.raises(em.EmberIOError, match=r"^\[Llama.from_pretrained\] shard"):
        em.models.Llama.from_pretrained(tmp_path)


def test_dtype_argument_and_stored_dtype(llama_tied, tmp_path, rng):
    path, ref = llama_tied
    half = em.models.Llama.from_pretrained(path, dtype=em.bfloat16)
    assert all(p.dtype == em.bfloat16 for p in half.parameters())
    ids = rng.integers(0, ref.config.vocab_size, (1, 8))
    np.testing.assert_allclose(half(ids).float().numpy(), _ref_logits(ref, ids), rtol=0.1, atol=0.15)
    em.save_safetensors({k: v.to_dtype(em.float16) for k, v in half.state_dict().items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    assert all(p.dtype == em.float16 for p in em.models.Llama.from_pretrained(tmp_path).parameters())


def test_sampling_is_seeded_and_filters(gpt2, rng):
    path, ref = gpt2
    model = em.models.GPT2.from_pretrained(path)
    prompt = rng.integers(0, ref.config.vocab_size, (3, 4))
    em.manual_seed(7)
    a = model.generate(prompt, 10, temperature=1.3, top_k=20, top_p=0.9).numpy()
    em.manual_seed(7)
    b = model.generate(prompt, 10, temperature=1.3, top_k=20, top_p=0.9).numpy()
    np.testing.assert_array_equal(a, b)
    greedy = model.generate(prompt, 10).numpy()
    np.testing.assert_array_equal(model.generate(prompt, 10, temperature=2.0, top_k=1).numpy(), greedy)
    np.testing.assert_array_equal(model.generate(prompt, 10, temperature=0.5, top_p=1e-6).numpy(), greedy)
    # top_k: every sampled token is among the k most likely of its step
    logits = em.tensor(rng.standard_normal((4, 50)).astype(np.float32))
    allowed = np.argsort(-logits.numpy(), -1)[:, :5]
    for _ in range(20):
        tok = em.models.generation.sample_next(logits, 1.0, top_k=5).numpy()
        assert all(tok[i, 0] in allowed[i] for i in range(4))


def test_eos_pads_finished_rows(gpt2):
    path, _ = gpt2
    model = em.models.GPT2.from_pretrained(path)
    out = model.generate([[1, 2, 3]], 8).numpy()[0]
    eos = int(out[4])  # the second new token: pretend it is the end of sequence
    got = model.generate([[1, 2, 3]], 8, eos_token_id=eos).numpy()[0]
    first = 3 + int(np.argmax(out[3:] == eos))
    np.testing.assert_array_equal(got[: first + 1], out[: first + 1])
    assert (got[first:] == eos).all()


def test_fresh_model_from_config_trains(device):
    cfg = dict(LLAMA_TIED_GQA, num_hidden_layers=1)
    em.manual_seed(0)
    model = em.models.Llama(cfg, device=device).train()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = em.tensor(np.arange(16).reshape(2, 8) % 101, device=device)
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        logits = model(ids[:, :-1])
        loss = em.nn.cross_entropy(logits.reshape(-1, 101), ids[:, 1:].reshape(-1))
        opt.backward_step(loss)
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_bad_input(tmp_path, llama_tied):
    path, _ = llama_tied
    with pytest.raises(em.EmberIOError, match=r"^\[Llama.from_pretrained\] .* is not a checkpoint directory"):
        em.models.Llama.from_pretrained(tmp_path / "nope")
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_TIED_GQA))
    with pytest.raises(em.EmberIOError, match="neither model.safetensors"):
        em.models.Llama.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(em.EmberValueError, match="JSON object"):
        em.models.Llama.from_pretrained(tmp_path)
    with pytest.raises(em.EmberValueError, match=r"^\[Llama\] the config lacks \['vocab_size', 'intermediate_size'"):
        em.models.Llama({"hidden_size": 8})
    with pytest.raises(em.EmberValueError, match="rope type 'yarn'"):
        em.models.Llama(dict(LLAMA_TIED_GQA, rope_scaling={"rope_type": "yarn", "factor": 2.0}))
    with pytest.raises(em.ShapeError, match="not a multiple of num_key_value_heads"):
        em.models.Llama(dict(LLAMA_TIED_GQA, num_key_value_heads=3))
    # a checkpoint whose weights have the wrong shape
    cfg = dict(LLAMA_TIED_GQA, hidden_size=32)
    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    os.symlink(os.path.join(path, "model.safetensors"), d / "model.safetensors")
    with pytest.raises(em.ShapeError, match=r"^\[load_state_dict\] model.embed_tokens.weight"):
        em.models.Llama.from_pretrained(d)
    model = em.models.Llama.from_pretrained(path)
    with pytest.raises(em.EmberTypeError, match=r"^\[Llama\] expected integer token ids"):
        model(em.tensor([[0.5]]))
    with pytest.raises(em.ShapeError, match="exceed the model.s context"):
        model.generate([[1]], 300)
    with pytest.raises(em.EmberValueError, match="temperature must be >= 0"):
        model.generate([[1]], 2, temperature=-1.0)
    with pytest.raises(em.EmberValueError, match=r"top_p must be in \(0, 1\]"):
        model.generate([[1]], 2, temperature=1.0, top_p=0.0)


@pytest.mark.parametrize("name,cls", [("llama_tied", em.models.Llama), ("gpt2", em.models.GPT2)])
def test_checkpointed_layers_give_the_same_gradients(request, name, cls, rng):
    path, ref = request.getfixturevalue(name)
    ids = rng.integers(0, ref.config.vocab_size, (2, 10))
    grads = []
    for ckpt in (False, True):
        model = cls.from_pretrained(path).train()
        for m in model.modules():
            if isinstance(m, em.nn.Dropout):
                m.p = 0.0
        model.checkpoint = ckpt
        logits = model(ids)
        g = em.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), em.tensor(ids.reshape(-1))).backward()
        grads.append({n: g[p].numpy() for n, p in model.named_parameters()})
    for n in grads[0]:
        np.testing.assert_allclose(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-7, err_msg=n)
