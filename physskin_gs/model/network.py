"""PhysSkin network: shape encoder, handle tokens, per-point decoder and skinning head.

Architecture: method.md 4.1 (PhysSkin Eqs. 4-7) with the CPU-trainable sizes of method.md 4.3:

* Fourier point embedding gamma(X): frequencies pi * 2^k (k = 0..n_freq-1) per axis, sin and cos, plus xyz,
  then Linear(3 + 6 n_freq -> d).
* Shape encoder: learnable latent tokens Q_s (L, d) cross-attend to gamma(P) of the surface points P, then
  ``enc_layers`` pre-norm self-attention blocks -> F_s (L, d).
* Handle tokens Q_h (T, d): one decoder layer (self-attention, cross-attention to F_s, FF) -> F_h (T, d).
* Per query point X: P1 = CA(gamma(X), F_s), F_p = CA(P1, F_h) (method.md 4.2 steps 4-5).
* Head: ResBlock(2d -> h), ELU, ResBlock(h -> h), ELU, Linear(h -> m) (optionally ONI-orthogonalised,
  method.md 4.4) applied to [gamma(X), F_p]. Output: m raw, signed weights per point (no normalisation here).

Attention is written with plain matrix products (method.md 4.3.1: fastest for finite differences on CPU,
and differentiable in forward mode). Query points are processed in chunks by the callers
(:func:`PhysSkinNet.decode_chunked`), so a million points never build one large attention matrix.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as Fn


@dataclass
class NetConfig:
    """Hyper-parameters of :class:`PhysSkinNet` (stored as JSON in every checkpoint)."""

    num_handles: int = 16  # m learned handles (the constant handle is appended outside the network)
    width: int = 128  # d
    heads: int = 4
    latents: int = 64  # L shape tokens
    enc_layers: int = 2  # self-attention layers after the cross-attention
    handle_tokens: int = 32  # T
    n_freq: int = 4  # Fourier frequencies pi * 2^k, k < n_freq
    head_hidden: int = 128
    ff_mult: int = 1  # feed-forward hidden width = ff_mult * d
    oni: bool = True
    oni_iters: int = 4

    @classmethod
    def from_dict(cls, d: Dict) -> "NetConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        return cls(**d)

    def to_dict(self) -> Dict:
        return asdict(self)


class PointEmbed(nn.Module):
    """gamma(X): (..., 3) -> (..., d). Features [sin(pi 2^k x_a), cos(pi 2^k x_a), x] -> Linear."""

    def __init__(self, n_freq: int, width: int) -> None:
        super().__init__()
        freqs = math.pi * (2.0 ** torch.arange(n_freq, dtype=torch.float32))  # [K]
        self.register_buffer("freqs", freqs, persistent=False)
        self.proj = nn.Linear(3 + 6 * n_freq, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = (x[..., :, None] * self.freqs).flatten(-2)  # [..., 3K]
        return self.proj(torch.cat([p.sin(), p.cos(), x], dim=-1))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Plain-math multi-head attention. q (..., Nq, d), k/v (..., Nk, d) -> (..., Nq, d)."""
    *b, nq, d = q.shape
    nk = k.shape[-2]
    dh = d // heads
    q = q.reshape(*b, nq, heads, dh).transpose(-2, -3)  # [.., h, Nq, dh]
    k = k.reshape(*b, nk, heads, dh).transpose(-2, -3)
    v = v.reshape(*b, nk, heads, dh).transpose(-2, -3)
    a = torch.softmax((q @ k.transpose(-1, -2)) * (dh**-0.5), dim=-1)  # [.., h, Nq, Nk]
    return (a @ v).transpose(-2, -3).reshape(*b, nq, d)


class MHA(nn.Module):
    """Multi-head attention with separate q/k/v/out projections (no dropout)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def kv_proj(self, mem: torch.Tensor):
        k, v = self.kv(mem).chunk(2, dim=-1)
        return k, v

    def forward(self, x: torch.Tensor, mem: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        if kv is None:
            kv = self.kv_proj(x if mem is None else mem)
        return self.out(attention(self.q(x), kv[0], kv[1], self.heads))


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(Fn.gelu(self.fc1(self.norm(x))))


class CrossBlock(nn.Module):
    """Pre-norm cross-attention block: x + MHA(LN(x), LN(mem)), then x + FF(LN(x))."""

    def __init__(self, width: int, heads: int, ff: int) -> None:
        super().__init__()
        self.nq = nn.LayerNorm(width)
        self.nm = nn.LayerNorm(width)
        self.attn = MHA(width, heads)
        self.ff = FeedForward(width, ff)

    def memory_kv(self, mem: torch.Tensor):
        """Precompute keys/values of the memory tokens (cached per object)."""
        return self.attn.kv_proj(self.nm(mem))

    def forward(self, x: torch.Tensor, mem: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        if kv is None:
            kv = self.memory_kv(mem)
        x = x + self.attn(self.nq(x), kv=kv)
        return self.ff(x)


class SelfBlock(nn.Module):
    """Pre-norm self-attention block."""

    def __init__(self, width: int, heads: int, ff: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = MHA(width, heads)
        self.ff = FeedForward(width, ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.attn(h)
        return self.ff(x)


class ResBlock(nn.Module):
    """``shortcut(x) + fc1(ELU(fc0(ELU(x))))`` with fc1 zero-initialised (method.md 4.2 step 6)."""

    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        hid = min(fin, fout)
        self.fc0 = nn.Linear(fin, hid)
        self.fc1 = nn.Linear(hid, fout)
        nn.init.zeros_(self.fc1.weight)
        nn.init.zeros_(self.fc1.bias)
        self.shortcut = nn.Linear(fin, fout, bias=False) if fin != fout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x if self.shortcut is None else self.shortcut(x)
        return s + self.fc1(Fn.elu(self.fc0(Fn.elu(x))))


def oni_weight(V: torch.Tensor, iters: int = 4, eps: float = 1e-5) -> torch.Tensor:
    """ONI orthogonalisation (Huang et al. 2020; method.md 4.4) of a weight V (m, in), m <= in (row variant).

    Zc = V - rowmean(V); S = Zc Zc^T + eps I; S <- S/||S||_F; B_0 = I; B <- 1.5 B - 0.5 B^3 S (``iters`` times);
    returns B_T Zc / sqrt(||S||_F). Rows of the result are (approximately) orthonormal.
    """
    m, n = V.shape
    if m > n:
        return oni_weight(V.t(), iters, eps).t()
    Zc = V - V.mean(dim=1, keepdim=True)
    S = Zc @ Zc.t() + eps * torch.eye(m, dtype=V.dtype, device=V.device)
    norm = S.norm()
    S = S / norm
    B = torch.eye(m, dtype=V.dtype, device=V.device)
    for _ in range(iters):
        B = 1.5 * B - 0.5 * (B @ B @ B) @ S
    return (B @ Zc) / norm.sqrt()


class SkinHead(nn.Module):
    """ResBlock(in -> h), ELU, ResBlock(h -> h), ELU, Linear(h -> m) [ONI optional]."""

    def __init__(self, fin: int, hidden: int, m: int, oni: bool, oni_iters: int) -> None:
        super().__init__()
        self.r0 = ResBlock(fin, hidden)
        self.r1 = ResBlock(hidden, hidden)
        self.out = nn.Linear(hidden, m)
        self.oni = oni
        self.oni_iters = oni_iters

    def out_weight(self) -> torch.Tensor:
        return oni_weight(self.out.weight, self.oni_iters) if self.oni else self.out.weight

    def forward(self, x: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = Fn.elu(self.r1(Fn.elu(self.r0(x))))
        w = self.out_weight() if weight is None else weight
        return Fn.linear(h, w, self.out.bias)


class PhysSkinNet(nn.Module):
    """PhysSkin skinning network (method.md 4.1/4.3). Outputs m raw signed weights per query point.

    Usage: ``cache = net.encode(surface)`` once per object (surface (S, 3) float32, normalised frame), then
    ``net.decode(x, cache)`` -> (N, m) raw weights for query points x (N, 3). Column normalisation and the
    constant handle are applied by the callers (losses, :class:`NeuralSkinningField`), method.md 5.
    """

    def __init__(self, config: Optional[NetConfig] = None, **kw) -> None:
        super().__init__()
        cfg = config if config is not None else NetConfig(**kw)
        self.config = cfg
        d, ff = cfg.width, cfg.ff_mult * cfg.width
        if d % cfg.heads:
            raise ValueError(f"width {d} is not divisible by heads {cfg.heads}")
        self.embed = PointEmbed(cfg.n_freq, d)
        self.latents = nn.Parameter(torch.randn(cfg.latents, d) * 0.02)
        self.enc_cross = CrossBlock(d, cfg.heads, ff)
        self.enc_self = nn.ModuleList([SelfBlock(d, cfg.heads, ff) for _ in range(cfg.enc_layers)])
        self.handle_queries = nn.Parameter(torch.randn(cfg.handle_tokens, d) * 0.02)
        self.handle_self = SelfBlock(d, cfg.heads, ff)
        self.handle_cross = CrossBlock(d, cfg.heads, ff)
        self.point_shape = CrossBlock(d, cfg.heads, ff)
        self.point_handle = CrossBlock(d, cfg.heads, ff)
        self.head = SkinHead(2 * d, cfg.head_hidden, cfg.num_handles, cfg.oni, cfg.oni_iters)

    @property
    def num_handles(self) -> int:
        return self.config.num_handles

    def encode(self, surface: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Shape and handle latents for one object.

        Args:
            surface: (S, 3) float32 surface points in the normalised frame (about [-1, 1]^3).
        Returns:
            dict with ``shape`` (L, d), ``handles`` (T, d) and the precomputed keys/values of both for the
            per-point cross-attentions, plus ``head_w`` (the (ONI-)effective head weight).
        """
        if surface.ndim != 2 or surface.shape[-1] != 3:
            raise ValueError(f"surface points must be (S, 3), got {tuple(surface.shape)}")
        e = self.embed(surface)  # [S, d]
        s = self.enc_cross(self.latents, e)  # [L, d]
        for blk in self.enc_self:
            s = blk(s)
        h = self.handle_self(self.handle_queries)
        h = self.handle_cross(h, s)  # [T, d]
        return {
            "shape": s,
            "handles": h,
            "kv_shape": self.point_shape.memory_kv(s),
            "kv_handles": self.point_handle.memory_kv(h),
            "head_w": self.head.out_weight(),
        }

    def decode(self, x: torch.Tensor, cache: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Raw weights (N, m) for query points x (N, 3) given ``cache = encode(surface)`` (Eq. 6-7)."""
        g = self.embed(x)  # [N, d]
        p1 = self.point_shape(g, kv=cache["kv_shape"])
        fp = self.point_handle(p1, kv=cache["kv_handles"])
        return self.head(torch.cat([g, fp], dim=-1), weight=cache["head_w"])

    def decode_chunked(self, x: torch.Tensor, cache: Dict[str, torch.Tensor], chunk: int = 2048) -> torch.Tensor:
        """:meth:`decode` in chunks of ``chunk`` points (same result; bounded memory)."""
        if x.shape[0] <= chunk:
            return self.decode(x, cache)
        return torch.cat([self.decode(x[i : i + chunk], cache) for i in range(0, x.shape[0], chunk)], dim=0)

    def forward(self, surface: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.encode(surface))


class SimplicitsMLP(nn.Module):
    """Per-object skinning MLP in the style of Simplicits (Modi et al. 2024): xyz -> ELU MLP -> m weights.

    Has the same ``encode``/``decode`` interface as :class:`PhysSkinNet` (``encode`` returns an empty cache),
    so :class:`NeuralSkinningField` and the losses work with either.
    """

    def __init__(self, num_handles: int = 16, hidden: int = 64, layers: int = 6) -> None:
        super().__init__()
        mods = [nn.Linear(3, hidden), nn.ELU()]
        for _ in range(layers - 2):
            mods += [nn.Linear(hidden, hidden), nn.ELU()]
        mods.append(nn.Linear(hidden, num_handles))
        self.net = nn.Sequential(*mods)
        self._m = num_handles

    @property
    def num_handles(self) -> int:
        return self._m

    def encode(self, surface: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {}

    def decode(self, x: torch.Tensor, cache: Dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(x)

    def decode_chunked(self, x: torch.Tensor, cache, chunk: int = 65536) -> torch.Tensor:
        return torch.cat([self.net(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)], dim=0)
