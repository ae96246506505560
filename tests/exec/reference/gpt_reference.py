#!/usr/bin/env python3
"""PyTorch reference for Loom's executor: the same GPT (and LLaMA-shaped and mixture-of-experts variants) with the same
initial parameters, computed in float64 autograd, so tests/exec/model_test.cc can check Loom's
hand-written forward and backward against it without depending on torch.

Regenerate (needs Debian's python3-torch):
    /usr/bin/python3 tests/exec/reference/gpt_reference.py > tests/exec/reference/gpt_reference.json
"""
import json
import math

import torch

MASK64 = (1 << 64) - 1
SEED = 1234


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def initial_value(seed, param_id, index):
    """Mirror of exec/model/gpt_layout.cc initial_value (counter-based normal draw)."""
    x = splitmix64((seed * 0x9E3779B97F4A7C15 + param_id * 0xBF58476D1CE4E5B9 + index) & MASK64)
    y = splitmix64(x)
    u1 = ((x >> 11) + 0.5) * 2.0 ** -53
    u2 = ((y >> 11) + 0.5) * 2.0 ** -53
    return float(torch.tensor(math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2),
                              dtype=torch.float32))


def normal(param_id, rows, cols, std, zero_from_row=None):
    values = [0.0] * (rows * cols)
    for r in range(rows):
        if zero_from_row is not None and r >= zero_from_row:
            continue
        for c in range(cols):
            values[r * cols + c] = float(torch.tensor(std, dtype=torch.float32) *
                                         torch.tensor(initial_value(SEED, param_id, r * cols + c), dtype=torch.float32))
    return torch.tensor(values, dtype=torch.float32).reshape(rows, cols).double().requires_grad_()


def layer_id(layer, kind):
    return 1000 + layer * 32 + kind


def expert_id(layer, expert, kind):
    return (1 << 40) + (layer << 20) + expert * 2 + kind


def is_moe_layer(cfg, l):
    moe = cfg.get("moe")
    return moe is not None and l >= moe.get("first_dense_layers", 0) and \
        (l - moe.get("first_dense_layers", 0)) % moe.get("layer_freq", 1) == 0


def build(cfg):
    L, h, H, KV, f, V, S = (cfg[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len"))
    D = h // H
    llama = cfg["norm"] == "rmsnorm"
    std_out = float(torch.tensor(0.02, dtype=torch.float32) / torch.sqrt(torch.tensor(2.0 * L, dtype=torch.float32)))
    p = {"wte.weight": normal(1, V, h, 0.02)}
    if not llama:
        p["wpe.weight"] = normal(2, S, h, 0.02)
    for l in range(L):
        pre = f"layers.{l}."
        for n, kw, kb in (("ln1", 0, 1), ("ln2", 6, 7)):
            p[pre + n + ".weight"] = torch.ones(h, dtype=torch.float64, requires_grad=True)
            if not llama:
                p[pre + n + ".bias"] = torch.zeros(h, dtype=torch.float64, requires_grad=True)
        p[pre + "attn.qkv.weight"] = normal(layer_id(l, 2), (H + 2 * KV) * D, h, 0.02)
        p[pre + "attn.proj.weight"] = normal(layer_id(l, 4), h, H * D, std_out)
        if cfg.get("qk_norm") in ("per_head", "full_width"):  # gains start at one, as Qwen3's and OLMo 2's
            per_head = cfg["qk_norm"] == "per_head"
            p[pre + "attn.q_norm.weight"] = torch.ones(D if per_head else H * D, dtype=torch.float64, requires_grad=True)
            p[pre + "attn.k_norm.weight"] = torch.ones(D if per_head else KV * D, dtype=torch.float64,
                                                       requires_grad=True)
        gated = 2 if cfg["activation"] == "swiglu" else 1
        fc_rows = gated * f
        if is_moe_layer(cfg, l):
            moe = cfg["moe"]
            E, ef, sf = moe["experts"], moe["expert_ffn"], moe.get("shared_ffn", 0)
            p[pre + "mlp.router.weight"] = normal(layer_id(l, 12), E, h, 0.02)
            if sf:
                p[pre + "mlp.shared.fc.weight"] = normal(layer_id(l, 13), gated * sf, h, 0.02)
                p[pre + "mlp.shared.proj.weight"] = normal(layer_id(l, 14), h, sf, std_out)
                if moe.get("shared_gate"):
                    p[pre + "mlp.shared.gate.weight"] = normal(layer_id(l, 15), 1, h, 0.02)
            for e in range(E):
                p[pre + f"mlp.experts.{e}.fc.weight"] = normal(expert_id(l, e, 0), gated * ef, h, 0.02)
                p[pre + f"mlp.experts.{e}.proj.weight"] = normal(expert_id(l, e, 1), h, ef, std_out)
            continue
        p[pre + "mlp.fc.weight"] = normal(layer_id(l, 8), fc_rows, h, 0.02)
        p[pre + "mlp.proj.weight"] = normal(layer_id(l, 10), h, f, std_out)
        if not llama:  # (MoE layers continue above: the MoE reference model is LLaMA-shaped)
            p[pre + "attn.qkv.bias"] = torch.zeros((H + 2 * KV) * D, dtype=torch.float64, requires_grad=True)
            p[pre + "attn.proj.bias"] = torch.zeros(h, dtype=torch.float64, requires_grad=True)
            p[pre + "mlp.fc.bias"] = torch.zeros(fc_rows, dtype=torch.float64, requires_grad=True)
            p[pre + "mlp.proj.bias"] = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    p["lnf.weight"] = torch.ones(h, dtype=torch.float64, requires_grad=True)
    if not llama:
        p["lnf.bias"] = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    if not cfg["tied_embeddings"]:
        p["head.weight"] = normal(3, V, h, 0.02)
    return p


def norm(x, w, b):
    if b is None:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rope(x, S, D):
    half = D // 2
    pos = torch.arange(S, dtype=torch.float64)[:, None]
    inv = torch.tensor([10000.0 ** (-2.0 * i / D) for i in range(half)], dtype=torch.float64)[None, :]
    theta = pos * inv
    cos = torch.cos(theta).float().double()[None, :, None, :]
    sin = torch.sin(theta).float().double()[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def mlp(cfg, m, fc_w, proj_w, fc_b=None, proj_b=None):
    fc = m @ fc_w.T + (fc_b if fc_b is not None else 0)
    if cfg["activation"] == "swiglu":
        f = fc.shape[-1] // 2
        act = torch.nn.functional.silu(fc[..., :f]) * fc[..., f:]
    else:
        act = torch.nn.functional.gelu(fc, approximate="tanh")
    return act @ proj_w.T + (proj_b if proj_b is not None else 0)


def moe_mlp(cfg, p, pre, m):
    """Top-k routing with a softmax over the k chosen logits; each token's output is the
    probability-weighted sum of its experts' MLPs plus the shared expert's."""
    moe = cfg["moe"]
    E, k = moe["experts"], moe["experts_per_token"]
    logits = m @ p[pre + "mlp.router.weight"].T
    top, chosen = torch.topk(logits, k, dim=-1)
    probs = torch.softmax(top, dim=-1)
    out = torch.zeros_like(m)
    for e in range(E):
        weight = (probs * (chosen == e)).sum(-1, keepdim=True)  # 0 where e was not chosen
        out = out + weight * mlp(cfg, m, p[pre + f"mlp.experts.{e}.fc.weight"], p[pre + f"mlp.experts.{e}.proj.weight"])
    if pre + "mlp.shared.fc.weight" in p:
        shared = mlp(cfg, m, p[pre + "mlp.shared.fc.weight"], p[pre + "mlp.shared.proj.weight"])
        if pre + "mlp.shared.gate.weight" in p:  # Qwen2-MoE: sigmoid(x·w) scales the shared expert
            shared = torch.sigmoid(m @ p[pre + "mlp.shared.gate.weight"].T) * shared
        out = out + shared
    return out


def forward(cfg, p, tokens, targets):
    L, h, H, KV, f, S = (cfg[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len"))
    D = h // H
    B = tokens.shape[0]
    llama = cfg["norm"] == "rmsnorm"
    x = p["wte.weight"][tokens]
    if not llama:
        x = x + p["wpe.weight"][torch.arange(S)][None]
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for l in range(L):
        pre = f"layers.{l}."
        g = lambda n: p.get(pre + n)
        a = norm(x, g("ln1.weight"), g("ln1.bias"))
        qkv = a @ g("attn.qkv.weight").T + (g("attn.qkv.bias") if g("attn.qkv.bias") is not None else 0)
        q = qkv[..., :H * D].reshape(B, S, H, D)
        k = qkv[..., H * D:(H + KV) * D].reshape(B, S, KV, D)
        v = qkv[..., (H + KV) * D:].reshape(B, S, KV, D)
        if cfg.get("qk_norm") == "per_head":  # Qwen3Attention: RMSNorm over each head's head_dim, before RoPE
            q, k = norm(q, g("attn.q_norm.weight"), None), norm(k, g("attn.k_norm.weight"), None)
        elif cfg.get("qk_norm") == "full_width":  # Olmo2Attention: over q_proj's and k_proj's whole outputs
            q = norm(q.reshape(B, S, H * D), g("attn.q_norm.weight"), None).reshape(B, S, H, D)
            k = norm(k.reshape(B, S, KV * D), g("attn.k_norm.weight"), None).reshape(B, S, KV, D)
        if llama:
            q, k = rope(q, S, D), rope(k, S, D)
        k = k.repeat_interleave(H // KV, dim=2)
        v = v.repeat_interleave(H // KV, dim=2)
        scores = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(D)
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        ctx = torch.einsum("bhst,bthd->bshd", att, v).reshape(B, S, H * D)
        x = x + ctx @ g("attn.proj.weight").T + (g("attn.proj.bias") if g("attn.proj.bias") is not None else 0)
        m = norm(x, g("ln2.weight"), g("ln2.bias"))
        if is_moe_layer(cfg, l):
            x = x + moe_mlp(cfg, p, pre, m)
        else:
            x = x + mlp(cfg, m, g("mlp.fc.weight"), g("mlp.proj.weight"), g("mlp.fc.bias"), g("mlp.proj.bias"))
    xf = norm(x, p["lnf.weight"], p.get("lnf.bias"))
    head = p["wte.weight"] if cfg["tied_embeddings"] else p["head.weight"]
    logits = xf @ head.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * S, -1), targets.reshape(-1))
    return logits, loss


def token_stream(n, vocab):
    return [(i * 7 + (i * i) % 11 + 3) % vocab for i in range(n)]


def case(cfg, batch):
    S, V = cfg["seq_len"], cfg["vocab"]
    stream = token_stream(batch * S + 1, V)
    tokens = torch.tensor([stream[b * S:(b + 1) * S] for b in range(batch)])
    targets = torch.tensor([stream[b * S + 1:(b + 1) * S + 1] for b in range(batch)])
    p = build(cfg)
    logits, loss = forward(cfg, p, tokens, targets)
    loss.backward()
    flat_logits = logits.detach().reshape(batch * S, -1)
    picks = [(0, 0), (0, 5), (3, 17), (batch * S - 1, V - 1), (batch * S - 1, 2)]
    grads = {}
    for name, t in p.items():
        g = t.grad.reshape(-1)
        idx = sorted({0, 1, g.numel() // 2, g.numel() - 1})
        grads[name] = [[i, float(g[i])] for i in idx]
    return {"model": cfg, "batch": batch, "seed": SEED, "loss": float(loss),
            "logits": [[r, c, float(flat_logits[r, c])] for r, c in picks], "grads": grads}


GPT = {"name": "ref-gpt", "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 4, "ffn_hidden": 128, "vocab": 64,
       "seq_len": 16, "activation": "gelu", "norm": "layernorm", "tied_embeddings": True}
LLAMA = {"name": "ref-llama", "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn_hidden": 48, "vocab": 64,
         "seq_len": 16, "activation": "swiglu", "norm": "rmsnorm", "tied_embeddings": False}

# Mixture of experts: a dense first layer, then 4 routed experts (top 2) and a shared expert.
MOE = dict(LLAMA, name="ref-moe", moe={"experts": 4, "experts_per_token": 2, "expert_ffn": 16, "shared_ffn": 16,
                                       "first_dense_layers": 1})

# Qwen2-MoE's shape: a sigmoid-gated shared expert, MoE on every other layer.
MOE_GATED = dict(LLAMA, name="ref-moe-gated", moe={"experts": 4, "experts_per_token": 2, "expert_ffn": 16,
                                                   "shared_ffn": 32, "shared_gate": True, "layer_freq": 2})

# QK-norm, per head (Qwen3, Gemma 3) and over the full width (OLMo 2).
QWEN3 = dict(LLAMA, name="ref-qwen3", qk_norm="per_head")
OLMO2 = dict(LLAMA, name="ref-olmo2", qk_norm="full_width")

if __name__ == "__main__":
    print(json.dumps({"generator": "tests/exec/reference/gpt_reference.py", "torch": torch.__version__,
                      "cases": [case(GPT, 2), case(LLAMA, 2), case(MOE, 2), case(MOE_GATED, 2),
                                                                   case(QWEN3, 2), case(OLMO2, 2)]}, indent=1))
