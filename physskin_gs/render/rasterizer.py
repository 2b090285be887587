"""Gaussian splatting rasterisation: gsplat on CUDA, our own pure-torch EWA splatting on CPU.

Public entry point: :func:`rasterize`. It takes full 3x3 covariances (deformed Gaussians carry
``Sigma' = F Sigma F^T``, method.md section 10) and either per-Gaussian colours or SH coefficients.

The torch backend reproduces gsplat 1.5.3's forward semantics (rendering.md section 2):

* EWA projection ``cov2d = J W Sigma W^T J^T + eps2d I`` with eps2d = 0.3 px (the low-pass filter),
  J evaluated at the camera-space mean with tx/tz, ty/tz clamped 30 % of the half-fov beyond the
  image border, ``radius = ceil(3.33 sqrt(diag cov2d))``; Gaussians with det <= 0, depth outside
  (near, far) or an off-screen box are culled.
* Per pixel, Gaussians in increasing depth: ``sigma = 0.5 (a dx^2 + c dy^2) + b dx dy`` (conic
  a, b, c = inverse cov2d), ``alpha = min(0.999, o exp(-sigma))``; skipped if sigma < 0 or
  alpha < 1/255; compositing stops (exclusively) at the first Gaussian whose next transmittance
  ``T (1 - alpha)`` would be <= 1e-4. Pixel centres are at integer + 0.5.

Fast path (:func:`rasterize_tiles`): visible Gaussians are depth-sorted once and binned to 4x4-pixel
tiles; one sort of (tile, depth rank) keys orders each tile's list front to back. Each list is padded to
blocks of 16 rows, and per chunk of blocks alpha is evaluated densely as [blocks, 16 pixels, 16 rows]
(``log o - sigma`` is one small matmul of a per-row quadratic in tile-centred pixel coordinates).
Transmittance is an in-block float32 cumulative sum of -log(1 - alpha) plus an exact float64 per-block
offset (earlier blocks of the tile), and colours are reduced per block with a batched matmul and per tile
in one fixed order, so the image does not depend on the chunk size. Large scenes are processed in bands
of tile rows to bound memory. No Python loop over Gaussians or pixels; the loops are over chunks.
Reference (:func:`rasterize_pairs_reference`): the straightforward (Gaussian, pixel) pair version,
stable-sorted by pixel; kept as the benchmark baseline and as a test oracle.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import OptionError
from physskin_gs.render.cameras import camera_center, validate_camera
from physskin_gs.render.sh import sh_degree_from_coeffs, sh_to_rgb
from physskin_gs.scene import finite_bounds, float32_local_origin

#: gsplat's constants (RasterizeToPixels3DGSFwd.cu in gsplat 1.5.3).
ALPHA_MIN = 1.0 / 255.0
ALPHA_MAX = 0.999
T_STOP = 1e-4
EPS2D = 0.3
RADIUS_SIGMA = 3.33
NEAR_PLANE = 0.01
FAR_PLANE = 1e10

_LOG_T_STOP = math.log(T_STOP)


class RenderOutput(NamedTuple):
    """Result of :func:`rasterize`.

    rgb: (H, W, C) float32 composited colour (background blended in if given).
    alpha: (H, W, 1) float32 accumulated opacity ``1 - T_final``.
    depth: (H, W, 1) float32 expected camera-space depth ``sum w z / sum w`` (0 where alpha = 0).
    """

    rgb: torch.Tensor
    alpha: torch.Tensor
    depth: torch.Tensor


class Projection(NamedTuple):
    """Per-Gaussian screen-space data, for all N inputs (culled ones have radii 0).

    radii: (N, 2) int32 pixel half-extents of the 3.33 sigma box; (0, 0) means culled.
    means2d: (N, 2) pixel coordinates of the projected centres.
    depths: (N,) camera-space z.
    conics: (N, 3) (a, b, c): inverse 2D covariance [[a, b], [b, c]].
    """

    radii: torch.Tensor
    means2d: torch.Tensor
    depths: torch.Tensor
    conics: torch.Tensor


# ------------------------------------------------------------------------------------------------
# projection
# ------------------------------------------------------------------------------------------------


def project_gaussians(
    means: torch.Tensor,
    covars: torch.Tensor,
    viewmat: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    eps2d: float = EPS2D,
    near_plane: float = NEAR_PLANE,
    far_plane: float = FAR_PLANE,
) -> Projection:
    """EWA projection of 3D Gaussians to the image (Zwicker et al. 2002; gsplat's pinhole model).

    Args:
        means: (N, 3) world-space centres. covars: (N, 3, 3) world-space covariances.
        viewmat: (4, 4) world-to-camera, OpenCV. K: (3, 3) intrinsics in pixels. width, height: pixels.
        eps2d: low-pass variance added to the 2D covariance (pixels^2).
    Returns:
        :class:`Projection`, in the dtype of ``means``; matches gsplat's ``_fully_fused_projection``.
    """
    dt = means.dtype
    Rv = viewmat[:3, :3].to(dt)
    tv = viewmat[:3, 3].to(dt)
    p = means @ Rv.T + tv  # [N, 3] camera space
    tx, ty, tz = p.unbind(-1)
    fx, fy, cx, cy = (K[0, 0].to(dt), K[1, 1].to(dt), K[0, 2].to(dt), K[1, 2].to(dt))
    tan_x = 0.5 * width / fx
    tan_y = 0.5 * height / fy
    lim_xp = (width - cx) / fx + 0.3 * tan_x
    lim_xn = cx / fx + 0.3 * tan_x
    lim_yp = (height - cy) / fy + 0.3 * tan_y
    lim_yn = cy / fy + 0.3 * tan_y
    tzs = torch.where(tz == 0, torch.full_like(tz, 1e-12), tz)
    u = torch.minimum(torch.maximum(tx / tzs, -lim_xn), lim_xp)  # clamped tx / tz
    v = torch.minimum(torch.maximum(ty / tzs, -lim_yn), lim_yp)
    inv_z = 1.0 / tzs
    zero = torch.zeros_like(tz)
    # J = [[fx/z, 0, -fx u/z], [0, fy/z, -fy v/z]]; T = J Rv maps world offsets to pixels  [N, 2, 3]
    J = torch.stack([fx * inv_z, zero, -fx * u * inv_z, zero, fy * inv_z, -fy * v * inv_z], -1).reshape(-1, 2, 3)
    T = J @ Rv
    cov2d = T @ covars.to(dt) @ T.transpose(1, 2)  # [N, 2, 2]
    c00 = cov2d[:, 0, 0] + eps2d
    c11 = cov2d[:, 1, 1] + eps2d
    c01 = 0.5 * (cov2d[:, 0, 1] + cov2d[:, 1, 0])
    det = c00 * c11 - c01 * c01
    detc = det.clamp_min(1e-10)
    conics = torch.stack([c11 / detc, -c01 / detc, c00 / detc], -1)  # [N, 3]
    means2d = torch.stack([fx * tx * inv_z + cx, fy * ty * inv_z + cy], -1)  # [N, 2]
    radius = torch.stack(
        [torch.ceil(RADIUS_SIGMA * torch.sqrt(c00.clamp_min(0))), torch.ceil(RADIUS_SIGMA * torch.sqrt(c11.clamp_min(0)))], -1
    )
    valid = (det > 0) & (tz > near_plane) & (tz < far_plane)
    inside = (
        (means2d[:, 0] + radius[:, 0] > 0)
        & (means2d[:, 0] - radius[:, 0] < width)
        & (means2d[:, 1] + radius[:, 1] > 0)
        & (means2d[:, 1] - radius[:, 1] < height)
    )
    keep = valid & inside & torch.isfinite(means2d).all(-1) & torch.isfinite(conics).all(-1)
    radius = torch.where(keep[:, None], radius, torch.zeros_like(radius))
    return Projection(radius.int(), means2d, tz, conics)


# ------------------------------------------------------------------------------------------------
# compositing kernels (torch)
# ------------------------------------------------------------------------------------------------


def _visible_sorted(proj: Projection):
    """Indices of visible Gaussians sorted by depth (stable), as int64 (M,)."""
    vis = torch.nonzero((proj.radii > 0).all(-1), as_tuple=False).squeeze(1)
    order = torch.sort(proj.depths[vis], stable=True).indices
    return vis[order]


def _sort_int64(keys: torch.Tensor) -> torch.Tensor:
    """Ascending sort of a 1-D int64 tensor (numpy's radix/introsort on CPU is ~4x faster than torch's)."""
    if keys.device.type == "cpu":
        return torch.from_numpy(np.sort(keys.numpy()))
    return torch.sort(keys).values


def _row_bands(y0: torch.Tensor, y1: torch.Tensor, nx: torch.Tensor, th: int, max_isect: int):
    """Split tile rows [0, th) into bands [r0, r1) of at most ~max_isect intersections (at least one row each)."""
    per_row = torch.zeros(th + 1, dtype=torch.long, device=y0.device)
    per_row.index_add_(0, y0, nx)
    per_row.index_add_(0, y1, -nx)
    per_row = torch.cumsum(per_row, 0)[:th].tolist()  # intersections in each tile row
    bands, r0, acc = [], 0, 0
    for r, c in enumerate(per_row):
        if acc > 0 and acc + c > max_isect:
            bands.append((r0, r))
            r0, acc = r, 0
        acc += c
    bands.append((r0, th))
    return bands


def rasterize_tiles(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    opacities: torch.Tensor,
    radii: torch.Tensor,
    depths: torch.Tensor,
    features: torch.Tensor,
    width: int,
    height: int,
    tile_size: int = 4,
    max_evals: int = 1 << 20,
    block: int = 16,
    max_isect: int = 1 << 24,
) -> torch.Tensor:
    """Tile-binned front-to-back compositing (fast path); see the module docstring.

    Layout: each tile's depth-ordered list of intersecting Gaussians is padded to a multiple of
    ``block`` rows with a transparent dummy, so a block of rows belongs to one tile. Per chunk of
    blocks, alpha is evaluated densely as [blocks, ts^2 pixels, block rows]; the inclusive
    log-transmittance is a float32 cumulative sum inside each block (at most ``block`` terms, so no
    cancellation) plus a float64 per-block offset (earlier blocks of the same tile and earlier chunks).
    Colours are reduced per block with one batched matmul and summed per tile.

    Args:
        means2d: (N, 2) float32 pixels. conics: (N, 3). opacities: (N,) in [0, 1].
        radii: (N, 2) int; (0, 0) = culled. depths: (N,) sort keys (camera z).
        features: (N, D) float32 per-Gaussian values to composite (colour, depth, ...).
        width, height: image size. tile_size: tile side in pixels. block: rows per block.
        max_evals: bound on (row, pixel) evaluations per chunk; memory is about 40 bytes each.
        max_isect: (Gaussian, tile) intersections per band of tile rows (about 80 bytes each); larger
            scenes are rendered band by band. Neither bound changes the image.
    Returns:
        (H, W, D + 1) float32: composited features and, last, the accumulated alpha.
    """
    dev = means2d.device
    D = features.shape[1]
    ts = int(tile_size)
    if not 1 <= ts <= 8:
        raise OptionError(f"tile_size must be in 1..8 (float32 precision of the per-tile expansion), got {ts}")
    if int(block) < 1:
        raise OptionError(f"block must be >= 1, got {block}")
    P = ts * ts
    B = int(block)
    tw, th = (width + ts - 1) // ts, (height + ts - 1) // ts
    n_tiles = tw * th
    out = torch.zeros(n_tiles, P, D + 1, dtype=torch.float32, device=dev)
    ids = _visible_sorted(Projection(radii, means2d, depths, conics))
    M = ids.numel()
    if M > 0:
        # one packed per-Gaussian table in depth order, [M + 1, 6 + D + 1]:
        # a/2, b, c/2 (conic), x, y (pixels), log opacity, features, 1 (alpha channel); last row a dummy
        # with opacity 0 for padding. One gather instead of one per attribute.
        table = torch.cat(
            [
                conics.float() * torch.tensor([0.5, 1.0, 0.5], device=dev),
                means2d.float(),
                torch.log(opacities.float())[:, None],
                features.float(),
                torch.ones(conics.shape[0], 1, device=dev),
                radii.float(),
            ],
            1,
        )
        table = torch.index_select(table, 0, ids)
        m2, r = table[:, 3:5], table[:, -2:]
        # tiles whose pixel centres (i + 0.5) may fall in [m - r, m + r]
        x0 = torch.floor((m2[:, 0] - r[:, 0] - 0.5) / ts).clamp(0, tw).long()
        x1 = (torch.floor((m2[:, 0] + r[:, 0] - 0.5) / ts) + 1).clamp(0, tw).long()
        y0 = torch.floor((m2[:, 1] - r[:, 1] - 0.5) / ts).clamp(0, th).long()
        y1 = (torch.floor((m2[:, 1] + r[:, 1] - 0.5) / ts) + 1).clamp(0, th).long()
        nx = (x1 - x0).clamp_min(0)
        counts = nx * (y1 - y0).clamp_min(0)  # [M]
        total = int(counts.sum())
        table = table[:, :-2]
        dummy = torch.zeros(1, table.shape[1], device=dev)
        dummy[0, 5] = -math.inf  # opacity 0: alpha = 0 everywhere
        table = torch.cat([table, dummy], 0)
        # bands of tile rows with at most ~max_isect intersections each bound the memory (tiles are independent)
        for r0, r1 in _row_bands(y0, y1, nx, th, int(max_isect)) if total > 0 else []:
            yb0, yb1 = y0.clamp(r0, r1), y1.clamp(r0, r1)
            cnt = nx * (yb1 - yb0).clamp_min(0)  # [M]
            n_isect = int(cnt.sum())
            if n_isect == 0:
                continue
            rank = torch.repeat_interleave(torch.arange(M, device=dev), cnt)  # [I] depth rank
            local = torch.arange(n_isect, device=dev) - (torch.cumsum(cnt, 0) - cnt)[rank]
            nxr = nx[rank]
            tile = (yb0[rank] + local // nxr) * tw + (x0[rank] + local % nxr)  # [I]
            del local, nxr
            # sort by (tile, depth rank) in one go; keys are unique, so no stable sort or gather needed
            key = _sort_int64(tile * M + rank)
            tile, rank = key // M, key % M
            del key
            # pad every tile's list to whole blocks; padding rows point at the dummy (index M)
            tiles_u, tcount = torch.unique_consecutive(tile, return_counts=True)
            tblocks = (tcount + B - 1) // B
            shift = (torch.cumsum(tblocks, 0) - tblocks) * B - (torch.cumsum(tcount, 0) - tcount)  # [T]
            pos = torch.arange(n_isect, device=dev) + torch.repeat_interleave(shift, tcount)
            n_blocks = int(tblocks.sum())
            rows = torch.full((n_blocks * B,), M, dtype=torch.long, device=dev)
            rows[pos] = rank
            del pos, rank, tile, shift
            block_tile = torch.repeat_interleave(tiles_u, tblocks)  # [n_blocks]
            _composite_blocks(out, rows.view(n_blocks, B), block_tile, table, ts, tw, B, max(1, int(max_evals) // (P * B)))
            del rows, block_tile
    img = out.reshape(th, tw, ts, ts, D + 1).permute(0, 2, 1, 3, 4).reshape(th * ts, tw * ts, D + 1)
    return img[:height, :width].contiguous()


def _composite_blocks(out, rows, block_tile, table, ts, tw, B, blocks_per_chunk) -> None:
    """Composite padded blocks of rows (see :func:`rasterize_tiles`) into ``out`` [n_tiles, P, D+1].

    ``table`` [M + 1, 6 + D + 1] packs per Gaussian: a/2, b, c/2 (conic), x, y (pixels), log opacity,
    features and a 1 (for the alpha channel). A skipped pair (alpha < 1/255) gets alpha = 0, i.e.
    log(1 - alpha) = 0, which leaves the transmittance unchanged exactly like gsplat's ``continue``.
    """
    dev = out.device
    P = ts * ts
    h = 0.5 * (ts - 1)  # pixel coordinates relative to the tile centre keep the expansion well conditioned
    lin = torch.arange(P, device=dev)
    u = (lin % ts).float() - h
    v = (lin // ts).float() - h
    basis = torch.stack([u * u, u * v, v * v, u, v, torch.ones_like(u)], 1)  # [P, 6]
    carry = torch.zeros(out.shape[0], P, dtype=torch.float64, device=dev)  # -log T per tile pixel
    # threshold_ keeps x > thr; with thr the float32 just below 1/255 that is x >= 1/255 (float32)
    thr = float(np.nextafter(np.float32(ALPHA_MIN), np.float32(0.0)))
    nb = rows.shape[0]
    contrib = torch.empty(nb, P, out.shape[2], dtype=torch.float32, device=dev)
    for b0 in range(0, nb, blocks_per_chunk):
        b1 = min(nb, b0 + blocks_per_chunk)
        n = b1 - b0
        prm = torch.index_select(table, 0, rows[b0:b1].reshape(-1)).view(n, B, -1)  # [n, B, 6 + D + 1]
        # per-row coefficients in float64: for needle-like Gaussians far from the tile centre the
        # terms of the expansion cancel heavily (float32 gave ~1e-3 errors at 1080p)
        a2, bb, c2, mx, my, logo = prm[:, :, :6].double().unbind(2)  # each [n, B]
        bt = block_tile[b0:b1]  # [n]
        ox = ((bt % tw) * ts).double().add_(0.5 + h)[:, None] - mx  # [n, B] tile centre - mean
        oy = ((bt // tw) * ts).double().add_(0.5 + h)[:, None] - my
        # log(o) - sigma(ox + u, oy + v) as a quadratic in (u, v): one matmul [P, 6] x [n, 6, B]
        coef = torch.stack(
            [
                -a2,
                -bb,
                -c2,
                -(2.0 * a2 * ox + bb * oy),
                -(bb * ox + 2.0 * c2 * oy),
                logo - (a2 * ox * ox + bb * ox * oy + c2 * oy * oy),
            ],
            1,
        ).float()  # [n, 6, B]
        alpha = torch.matmul(basis, coef).exp_().clamp_max_(ALPHA_MAX)  # [n, P, B] o exp(-sigma), capped
        torch.threshold_(alpha, thr, 0.0)  # skipped pairs: alpha = 0 leaves T unchanged (gsplat's continue)
        inv = torch.rsub(alpha, 1.0).reciprocal_()  # 1 / (1 - alpha)
        nl = torch.log(inv)  # [n, P, B] -log(1 - alpha) >= 0
        odds = inv.sub_(1.0)  # alpha / (1 - alpha)
        cs = torch.cumsum(nl, 2)  # in-block -log T (inclusive)
        # per-block offset: carry of the tile + totals of its earlier blocks (float64)
        btot = cs[:, :, -1].double()  # [n, P]
        bcs = torch.cumsum(btot, 0)
        segt, segc = torch.unique_consecutive(bt, return_counts=True)
        first = torch.cumsum(segc, 0) - segc
        base = carry[segt] - (bcs[first] - btot[first])  # [S, P]
        off = bcs - btot + torch.repeat_interleave(base, segc, dim=0)  # [n, P] exclusive -log T
        carry[segt] = bcs[first + segc - 1] + base
        Ti = torch.sub(off.float().neg_()[:, :, None], cs, out=cs).exp_()  # inclusive T
        torch.threshold_(Ti, T_STOP, 0.0)  # stop once T (1 - alpha) <= 1e-4 (exclusive, as gsplat)
        w = Ti.mul_(odds)  # alpha T_exclusive = T_inclusive alpha / (1 - alpha)
        torch.bmm(w, prm[:, :, 6:], out=contrib[b0:b1])  # [n, P, D+1] per-block colour sums
    # per-tile sums in one fixed order, so the image does not depend on the chunk size
    tiles_u, tcount = torch.unique_consecutive(block_tile, return_counts=True)
    out[tiles_u] = torch.segment_reduce(contrib, "sum", lengths=tcount, axis=0)


def rasterize_pairs_reference(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    opacities: torch.Tensor,
    radii: torch.Tensor,
    depths: torch.Tensor,
    features: torch.Tensor,
    width: int,
    height: int,
    max_pairs: int = 1 << 20,
) -> torch.Tensor:
    """Straightforward reference compositing over (Gaussian, pixel) pairs (rendering.md section 2).

    Enumerates every pixel of each visible Gaussian's radius box in depth order, drops pairs with
    sigma < 0 or alpha < 1/255, stable-sorts by pixel and composites with a segmented exclusive
    cumulative sum of log(1 - alpha) in float64, carrying log T per pixel across chunks. Same
    arguments and output as :func:`rasterize_tiles`; slower (the sort over pairs dominates).
    """
    dev = means2d.device
    D = features.shape[1]
    npix = width * height
    out = torch.zeros(npix, D + 1, dtype=torch.float32, device=dev)
    logT = torch.zeros(npix, dtype=torch.float64, device=dev)
    ids = _visible_sorted(Projection(radii, means2d, depths, conics))
    if ids.numel() == 0:
        return out.reshape(height, width, D + 1)
    m2 = means2d[ids].float()
    r = radii[ids].long()
    con = conics[ids].float()
    op = opacities[ids].float()
    ft = features[ids].float()
    # pixel index box: centres i + 0.5 within [m - r, m + r]
    x0 = torch.ceil(m2[:, 0] - r[:, 0] - 0.5).clamp(0, width).long()
    x1 = (torch.floor(m2[:, 0] + r[:, 0] - 0.5) + 1).clamp(0, width).long()
    y0 = torch.ceil(m2[:, 1] - r[:, 1] - 0.5).clamp(0, height).long()
    y1 = (torch.floor(m2[:, 1] + r[:, 1] - 0.5) + 1).clamp(0, height).long()
    nx = (x1 - x0).clamp_min(0)
    counts = nx * (y1 - y0).clamp_min(0)
    csum = torch.cumsum(counts, 0)
    total = int(csum[-1])
    start = 0
    while start < total:
        # chunk boundary at a whole number of Gaussians (at least one)
        g_lo = int(torch.searchsorted(csum, torch.tensor(start, device=dev), right=True))
        g_hi = int(torch.searchsorted(csum, torch.tensor(start + max_pairs, device=dev), right=True))
        g_hi = max(g_hi, g_lo + 1)
        cnt = counts[g_lo:g_hi]
        n = int(cnt.sum())
        g = torch.repeat_interleave(torch.arange(g_lo, g_hi, device=dev), cnt)
        local = torch.arange(n, device=dev) - (torch.cumsum(cnt, 0) - cnt)[g - g_lo]
        px = x0[g] + local % nx[g]
        py = y0[g] + local // nx[g]
        dx = px.float() + 0.5 - m2[g, 0]
        dy = py.float() + 0.5 - m2[g, 1]
        c = con[g]
        sigma = 0.5 * (c[:, 0] * dx * dx + c[:, 2] * dy * dy) + c[:, 1] * dx * dy
        alpha = (op[g] * torch.exp(-sigma)).clamp_max(ALPHA_MAX)
        ok = (sigma >= 0) & (alpha >= ALPHA_MIN)
        g, alpha, pix = g[ok], alpha[ok], (py * width + px)[ok]
        pix, order = torch.sort(pix, stable=True)
        g, alpha = g[order], alpha[order]
        la = torch.log1p(-alpha).double()
        cs = torch.cumsum(la, 0)
        upix, ucnt = torch.unique_consecutive(pix, return_counts=True)
        first = torch.cumsum(ucnt, 0) - ucnt
        seg = torch.repeat_interleave(torch.arange(upix.numel(), device=dev), ucnt)
        incl = cs + (logT[upix] - (cs[first] - la[first]))[seg]
        logT[upix] = incl[first + ucnt - 1]
        w = (torch.exp(incl - la).float() * alpha) * (incl > _LOG_T_STOP)
        out.index_add_(0, pix, torch.cat([w[:, None] * ft[g], w[:, None]], 1))
        start = int(csum[g_hi - 1])
    return out.reshape(height, width, D + 1)


# ------------------------------------------------------------------------------------------------
# public entry point
# ------------------------------------------------------------------------------------------------


def _check_inputs(means, covars, opacities, colors, view_rotations):
    if not isinstance(means, torch.Tensor) or means.ndim != 2 or means.shape[1] != 3:
        raise OptionError(f"means must be an (N, 3) tensor, got {tuple(getattr(means, 'shape', ()))}")
    n = means.shape[0]
    if not isinstance(covars, torch.Tensor) or tuple(covars.shape) != (n, 3, 3):
        raise OptionError(f"covars must be ({n}, 3, 3), got {tuple(getattr(covars, 'shape', ()))}")
    if not isinstance(opacities, torch.Tensor) or tuple(opacities.shape) != (n,):
        raise OptionError(f"opacities must be ({n},), got {tuple(getattr(opacities, 'shape', ()))}")
    if not isinstance(colors, torch.Tensor) or colors.shape[0] != n or colors.ndim not in (2, 3):
        raise OptionError(f"colors must be ({n}, C) colours or ({n}, K+1, 3) SH, got {tuple(getattr(colors, 'shape', ()))}")
    if colors.ndim == 3:
        if colors.shape[2] != 3:
            raise OptionError(f"SH coefficients must be ({n}, K+1, 3), got {tuple(colors.shape)}")
        sh_degree_from_coeffs(colors.shape[1])
    if view_rotations is not None and tuple(view_rotations.shape) != (n, 3, 3):
        raise OptionError(f"view_rotations must be ({n}, 3, 3), got {tuple(view_rotations.shape)}")


def gaussian_colors(
    means: torch.Tensor,
    colors: torch.Tensor,
    viewmat: torch.Tensor,
    view_rotations: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Per-Gaussian colours for one camera: ``colors`` as given if (N, C), else SH (N, K+1, 3)
    evaluated along ``R^T (mu - c)`` and mapped to ``max(SH + 0.5, 0)`` (method.md section 10)."""
    if colors.ndim == 2:
        return colors
    return sh_to_rgb(colors, means, camera_center(viewmat.to(means.dtype)), view_rotations)


def _gsplat_available_for(*tensors) -> bool:
    return torch.cuda.is_available() and all(t.is_cuda for t in tensors if isinstance(t, torch.Tensor))


def rasterize(
    means: torch.Tensor,
    covars: torch.Tensor,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    viewmat: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    background: Optional[torch.Tensor] = None,
    backend: str = "auto",
    view_rotations: Optional[torch.Tensor] = None,
) -> RenderOutput:
    """Render 3D Gaussians given by full covariances.

    Args:
        means: (N, 3) float32 world-space centres, scene units.
        covars: (N, 3, 3) float32 world-space covariances (e.g. deformed ``F Sigma F^T``).
        opacities: (N,) float32 in [0, 1] (activated, not logits).
        colors: (N, C) colours (any C; 3 for RGB), or (N, K+1, 3) SH coefficients (DC first, degree
            <= 4) evaluated per camera as ``max(SH(d) + 0.5, 0)`` (formats.md 1).
        viewmat: (4, 4) world-to-camera transform, OpenCV convention (formats.md 5).
        K: (3, 3) pinhole intrinsics in pixels.
        width, height: image size in pixels.
        background: optional (C,) colour blended behind: ``rgb + (1 - alpha) * background``.
        backend: ``"auto"`` (gsplat only if CUDA is available and every tensor is on CUDA, else torch),
            ``"gsplat"`` (raises OptionError if that is impossible) or ``"torch"``.
        view_rotations: optional (N, 3, 3) rotation R_F of each Gaussian's local deformation; SH are
            evaluated along ``R_F^T d`` (method.md section 10). Ignored for plain colours.
    Returns:
        :class:`RenderOutput` with rgb (H, W, C), alpha (H, W, 1), depth (H, W, 1) (expected depth).
    Raises:
        OptionError for bad shapes, a bad camera (see :func:`validate_camera`) or an unknown backend.
    """
    _check_inputs(means, covars, opacities, colors, view_rotations)
    validate_camera(viewmat, K, width, height)
    width, height = int(width), int(height)
    if backend not in ("auto", "gsplat", "torch"):
        raise OptionError(f"unknown render backend {backend!r}; use auto, gsplat or torch")
    tensors = (means, covars, opacities, colors, viewmat, K)
    if backend == "gsplat" and not _gsplat_available_for(*tensors):
        raise OptionError("backend 'gsplat' needs CUDA and all input tensors on a CUDA device")
    use_gsplat = backend == "gsplat" or (backend == "auto" and _gsplat_available_for(*tensors))
    means, viewmat, near = _local_frame(means, viewmat)
    feats = gaussian_colors(means, colors, viewmat, view_rotations).float()  # [N, C]
    C = feats.shape[1]
    if background is not None:
        background = torch.as_tensor(background, dtype=torch.float32, device=means.device).reshape(-1)
        if background.numel() != C:
            raise OptionError(f"background has {background.numel()} values, expected {C}")
    if use_gsplat:
        return _rasterize_gsplat(means, covars, opacities, feats, viewmat, K, width, height, background, near)
    proj = project_gaussians(means.float(), covars.float(), viewmat.float(), K.float(), width, height,
                             near_plane=near)
    img = rasterize_tiles(
        proj.means2d, proj.conics, opacities.float(), proj.radii, proj.depths,
        torch.cat([feats, proj.depths[:, None].float()], 1), width, height,
    )
    return _finish(img, C, background)


def _finish(img: torch.Tensor, C: int, background: Optional[torch.Tensor]) -> RenderOutput:
    """Split (H, W, C + 2) [features, depth-sum, alpha] into a RenderOutput."""
    rgb = img[..., :C]
    alpha = img[..., C + 1 : C + 2]
    depth = torch.where(alpha > 0, img[..., C : C + 1] / alpha.clamp_min(1e-10), torch.zeros_like(alpha))
    if background is not None:
        rgb = rgb + (1.0 - alpha) * background
    return RenderOutput(rgb.contiguous(), alpha.contiguous(), depth.contiguous())


def _local_frame(means: torch.Tensor, viewmat: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, float]:
    """The means and the world-to-camera matrix about a local origin when the Gaussians lie far from the scene's
    (:func:`~physskin_gs.scene.float32_local_origin`: an exact float32 shift, the camera's translation moved in
    float64; in float32 ``R x + t`` with x and t large cancels most of the digits: a capture 1e5 units out rendered
    blocky), and the near plane: :data:`NEAR_PLANE` scene units, or that fraction of the Gaussians' extent when
    it is under 1 unit (a scene in kilometres, its 1 m object 0.001 units across, was drawn nearer than a fixed
    0.01 and culled whole). Returns (means, viewmat, near_plane)."""
    bounds = finite_bounds(means)
    extent = float((bounds[1] - bounds[0]).max())
    near = NEAR_PLANE * min(1.0, extent) if extent > 0 else NEAR_PLANE
    origin = float32_local_origin(means, bounds)  # [3] float64
    if bool((origin != 0).any()):
        means = means - origin.to(device=means.device, dtype=means.dtype)
        vm = viewmat.detach().to(torch.float64).clone()
        vm[:3, 3] += vm[:3, :3] @ origin.to(vm.device)
        viewmat = vm.to(viewmat.dtype)
    return means, viewmat, near


def _rasterize_gsplat(means, covars, opacities, feats, viewmat, K, width, height, background,
                      near_plane: float = NEAR_PLANE) -> RenderOutput:
    """gsplat backend (CUDA only): per-camera precomputed colours, ``covars=``, ``packed=False``."""
    import gsplat  # lazy: never imported on the CPU path (rendering.md 1)

    colors, alphas, _ = gsplat.rasterization(
        means.float(),
        None,
        None,
        opacities.float(),
        feats[None].float(),
        viewmat[None].float(),
        K[None].float(),
        width,
        height,
        near_plane=near_plane,
        far_plane=FAR_PLANE,
        eps2d=EPS2D,
        sh_degree=None,
        packed=False,
        backgrounds=None if background is None else background[None],
        render_mode="RGB+ED",
        covars=covars.float(),
    )
    return RenderOutput(colors[0, ..., :-1].contiguous(), alphas[0].contiguous(), colors[0, ..., -1:].contiguous())
