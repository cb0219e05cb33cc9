"""``transformer``: a small GPT-style decoder with a tied output head.

Token + learned positional embeddings, 2 pre-LayerNorm blocks (causal
self-attention, GELU MLP), a final LayerNorm and an output head whose weight IS the
token embedding weight (one Parameter object, so DDP counts it once, under
``tok_emb.weight``). Loss: next-token cross-entropy.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models.contract import Training
from ddpsim.models._data import batch_generator, teacher_generator

VOCAB = 256
SEQ_LEN = 64


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """GPT-style decoder: vocab 256, context 64, width 128, 4 heads, 2 blocks."""

    def __init__(self, vocab: int = VOCAB, seq_len: int = SEQ_LEN, dim: int = 128,
                 heads: int = 4, depth: int = 2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: the same Parameter object
        # GPT-2 style: small embeddings, else the tied head's logits start huge.
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb.weight, std=0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        h = self.tok_emb(tokens) + self.pos_emb(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def next_token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def transformer() -> Training:
    """Tied-embedding GPT on a fixed random Markov chain; batch 16 of 64 tokens.

    Each next token is a fixed function of the current one (a random permutation)
    with probability 0.75, else uniform noise, so the loss can fall well below
    log(256). ``inputs`` are tokens[:, :-1], ``target`` tokens[:, 1:].
    """
    base = 55_000
    successor = torch.randperm(VOCAB, generator=teacher_generator(base))

    def batch(iteration: int, rank: int, world_size: int, batch_size: int):
        g = batch_generator(base, iteration, rank)
        tokens = torch.empty(batch_size, SEQ_LEN + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(VOCAB, (batch_size,), generator=g)
        noise = torch.randint(VOCAB, (batch_size, SEQ_LEN), generator=g)
        follow = torch.rand(batch_size, SEQ_LEN, generator=g) < 0.75
        for i in range(SEQ_LEN):
            tokens[:, i + 1] = torch.where(follow[:, i], successor[tokens[:, i]], noise[:, i])
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return Training(TinyGPT(), batch, next_token_loss, default_batch_size=16)
