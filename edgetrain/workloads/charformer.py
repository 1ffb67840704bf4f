"""The first paper's character-level transformer (6 layers, 6 heads, 256-dim, sequence 64)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention whose inner width need not divide the embedding.

    The paper pairs 6 heads with 256 dimensions; 256 is not a multiple of 6, so each head gets
    256 // 6 = 42 dimensions and the output projection maps 6·42 back to 256.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        inner = self.head_dim * num_heads
        self.qkv = nn.Linear(embed_dim, 3 * inner)
        self.proj = nn.Linear(inner, embed_dim)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).split(self.head_dim * self.num_heads, dim=2)
        shape = (batch, seq, self.num_heads, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        projected: torch.Tensor = self.proj(out.transpose(1, 2).reshape(batch, seq, -1))
        return projected


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dim)
        self.attn = CausalSelfAttention(embed_dim, num_heads, dropout)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, 4 * embed_dim),
            nn.GELU(),
            nn.Linear(4 * embed_dim, embed_dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        mixed: torch.Tensor = x + self.mlp(self.ln2(x))
        return mixed


class CharTransformer(nn.Module):
    """Next-character prediction over a fixed vocabulary; logits for every position."""

    def __init__(
        self,
        vocab_size: int,
        seq_len: int = 64,
        embed_dim: int = 256,
        num_layers: int = 6,
        num_heads: int = 6,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.token = nn.Embedding(vocab_size, embed_dim)
        self.position = nn.Embedding(seq_len, embed_dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *(Block(embed_dim, num_heads, dropout) for _ in range(num_layers))
        )
        self.ln = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        pos = torch.arange(seq, device=tokens.device)
        x = self.drop(self.token(tokens) + self.position(pos))
        logits: torch.Tensor = self.head(self.ln(self.blocks(x)))
        return logits
