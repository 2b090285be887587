"""Several bodies stepped together with penalty contact (physskin_gs.physics.contact, issue 24): the joint objective's
gradient against finite differences, bodies apart behave exactly as alone, a body dropped on a body rests on top,
a ball slid off a static box's edge falls past it, and a head-on push passes momentum from one body to the other."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from physskin_gs.model.field import RBFSkinningField
from physskin_gs.physics.contact import BodyContactSystem, default_contact_radius
from physskin_gs.physics.simulator import SubspaceSimulator, _StepContext

SIZE = 0.2  # cube edge (m)
N = 6  # cubature points per cube edge
SPACING = SIZE / N
#: no pair touching at a rest distance of its own: overlapping samples at their full radii (the contact math's tests)
NO_REST = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def _body(points, volume, handles=4, seed=1, **kw) -> SubspaceSimulator:
    X = torch.as_tensor(np.asarray(points), dtype=torch.float32)
    c = X.mean(0)
    size = float((X.max(0).values - X.min(0).values).max())
    cen = c + size * 0.3 * (torch.rand(handles, 3, generator=torch.Generator().manual_seed(seed)) - 0.5)
    W, dW = RBFSkinningField(cen, size * 0.6).weights_and_grads(X)
    args = dict(E=1e5, nu=0.3, density=500.0, dt=0.02, up=(0, 0, 1), floor_height=None, damping=0.05)
    args.update(kw)
    return SubspaceSimulator(X, W, dW, volume, **args)


def _cube(center, **kw) -> SubspaceSimulator:
    g = (np.arange(N) + 0.5) * SPACING - SIZE / 2
    P = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3) + np.asarray(center)
    return _body(P, SIZE ** 3, **kw)


def _ball(center, R=0.1, a=0.025, **kw) -> SubspaceSimulator:
    g = np.arange(-R, R + 1e-9, a)
    P = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    P = P[np.linalg.norm(P, axis=1) <= R] + np.asarray(center)
    return _body(P, 4.0 / 3.0 * np.pi * R ** 3, **kw)


def _set_velocity(b: SubspaceSimulator, v) -> None:
    """Give every cubature point of ``b`` the velocity v (3,) m/s (least squares in its handle space)."""
    target = torch.tensor(v, dtype=torch.float64).expand(b.n, 3)
    b.qdot = torch.linalg.lstsq(b.Phi, target).solution.T.contiguous()


def test_default_radius_is_a_fraction_of_the_spacing():
    g = np.arange(5) * 0.1
    P = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    assert default_contact_radius(torch.from_numpy(P)) == pytest.approx(0.055)


@pytest.mark.parametrize("rest", ["full radii", "touching at rest"])
def test_joint_gradient_matches_finite_differences(rest):
    """The contact and friction terms' gradient through both bodies' LBS (the Newton step's g) equals central
    differences of the joint objective at an iterate where the cubes overlap, with every pair at its full contact
    distance and with the pairs overlapping at construction at their rest distances."""
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING))  # overlapping a third of a spacing
    sysm = BodyContactSystem([a, b], rest_pairs=NO_REST if rest == "full radii" else None)
    assert (sysm.rest_overlaps > 10) == (rest != "full radii")
    h = sysm.dt
    ctxs = [_StepContext(h=h, q_pred=x.q.clone(), q_prev=x.q.clone(), D=None) for x in (a, b)]
    g = torch.Generator().manual_seed(3)
    qs = [x.q + 0.002 * torch.randn(x.q.shape, generator=g, dtype=torch.float64) for x in (a, b)]
    if rest != "full radii":  # pressed 0.2 spacing further together: the rest pairs overlap
        down = torch.zeros(b.n, 3, dtype=torch.float64)
        down[:, 2] = -0.2 * SPACING
        qs[1] = qs[1] + torch.linalg.lstsq(b.Phi, down).solution.T
    fric = sysm._friction_pairs(*sysm._current(), h)  # friction of pairs touching at the step's start
    assert fric is not None
    E, evs, x, pairs, gx, gn = sysm._joint(qs, ctxs, True, fric)
    assert pairs.i.size > 10
    so = sysm.offsets_samples  # the contact gradient dE/dx joins each body's own gradient (as in the Newton step)
    grads = [bd._gradient(ev, c, gx[so[k]:so[k + 1]]) for k, (bd, ev, c) in enumerate(zip((a, b), evs, ctxs))]
    eps = 1e-7
    for body in (0, 1):
        for idx in [(0, 3), (2, 7), (1, a.K4 - 1)]:
            qp = [q.clone() for q in qs]
            qm = [q.clone() for q in qs]
            qp[body][idx] += eps
            qm[body][idx] -= eps
            fd = (sysm._joint(qp, ctxs, False, fric)[0] - sysm._joint(qm, ctxs, False, fric)[0]) / (2 * eps)
            assert float(grads[body][idx]) == pytest.approx(fd, rel=1e-4, abs=1e-12)


def test_bodies_apart_move_as_they_would_alone():
    """With no contact the joint solve is the bodies' own solves: the same positions as stepping each alone (after
    5 steps of falling: 2e-5 m apart at most, 6 mm fallen)."""
    a1, b1 = _cube((0, 0, 0.5), gravity=9.8), _cube((1.0, 0, 0.5), gravity=9.8, seed=2)
    a2, b2 = _cube((0, 0, 0.5), gravity=9.8), _cube((1.0, 0, 0.5), gravity=9.8, seed=2)
    sysm = BodyContactSystem([a1, b1])
    for _ in range(5):
        st = sysm.step()
        a2.step()
        b2.step()
    assert st.pairs_body == 0 and st.pairs_static == 0
    # the same motion within the solvers' tolerances (the bodies' own adaptive solver reuses Hessian factors)
    torch.testing.assert_close(a1.positions(), a2.positions(), atol=2e-5, rtol=0)
    torch.testing.assert_close(b1.positions(), b2.positions(), atol=2e-5, rtol=0)


def _turned_cube(center, angle, n=8, **kw) -> SubspaceSimulator:
    """A cube of n^3 cubature points whose lattice is turned by ``angle`` (radians) about z: its samples do not
    line up with another cube's, as two captured bodies' points never do."""
    g = (np.arange(n) + 0.5) * (SIZE / n) - SIZE / 2
    P = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    c, s = np.cos(angle), np.sin(angle)
    P = P @ np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]).T
    return _body(P + np.asarray(center), SIZE ** 3, **kw)


def _faces(lower, upper, n=8):
    """(lower cube's top face, upper cube's bottom face) heights (m) of two n^3 cubes: the outer cubature layers
    are half a spacing inside the faces."""
    xl, xu = lower.positions().numpy(), upper.positions().numpy()
    return (np.sort(xl[:, 2])[-n * n:].mean() + SIZE / n / 2, np.sort(xu[:, 2])[:n * n].mean() - SIZE / n / 2)


@pytest.mark.parametrize("angle", [0.3, 0.6])
def test_a_body_dropped_on_a_body_comes_to_rest_on_top(angle):
    """A cube (8^3 samples, lattice turned about z) dropped from 0.15 m onto a cube standing on the floor comes to
    rest on it: its bottom face on the lower cube's top face within 1 % of its size (measured +0.5 / +0.6 %:
    friction holds it where it lands on the other's sample spheres), no overlap of contact spheres deeper than 1 %
    of its size, and at rest (moved less than 0.5 % of its size in the last 0.4 s; measured <= 0.4 mm)."""
    lower = _turned_cube((0.0, 0.0, SIZE / 2 + 0.001), 0.0, gravity=9.8, floor_height=0.0, friction=40.0)
    upper = _turned_cube((0.03, 0.0, 0.45), angle, gravity=9.8, floor_height=0.0, seed=2, friction=40.0)
    sysm = BodyContactSystem([lower, upper])
    st = sysm.step(150)
    assert st.pairs_body >= 3
    before = upper.positions().clone()
    st = sysm.step(20)
    top_face, bottom_face = _faces(lower, upper)
    assert abs(bottom_face - top_face) < 0.01 * SIZE, (bottom_face, top_face)
    assert st.max_overlap < 0.01 * SIZE
    assert float((upper.positions() - before).norm(dim=1).max()) < 5e-3 * SIZE
    xu = upper.positions().numpy()  # the upper cube's centre stays over the lower one (it did not slide off)
    assert abs(xu[:, 0].mean()) < SIZE / 2 and abs(xu[:, 1].mean()) < SIZE / 2


def test_coulomb_friction_holds_a_body_resting_off_centre():
    """A cube resting on another with a quarter of its width overhanging stays there: at the lower cube's edge the
    sphere normals tilt and push it outwards, a constant load that viscous friction alone turns into a slide off
    the edge (mu 0: it falls past the lower cube's top within 3 s), Coulomb friction (mu 0.5) holds it."""
    ends = {}
    for mu in (0.0, 0.5):
        lower = _turned_cube((0.0, 0.0, SIZE / 2 + 0.001), 0.0, gravity=9.8, floor_height=0.0, friction=40.0)
        upper = _turned_cube((0.05, 0.0, 0.45), 0.6, gravity=9.8, floor_height=0.0, seed=2, friction=40.0)
        sysm = BodyContactSystem([lower, upper], mu=mu)
        sysm.step(150)
        ends[mu] = _faces(lower, upper) + (float(upper.positions()[:, 0].mean()),)
    assert ends[0.0][1] < ends[0.0][0] - 0.25 * SIZE, ends  # slid off: its bottom well below the lower top face
    top, bottom, x = ends[0.5]
    assert abs(bottom - top) < 0.01 * SIZE and abs(x - 0.05) < 0.05 * SIZE, ends  # on top, where it landed


def test_a_ball_slid_off_a_static_box_edge_falls_past_it():
    """A ball sliding at 1 m/s on a static box top (a point collider: the top face for x <= 0 and the +x side face)
    stays on the top while over it, then passes the edge and falls below the top, beside the side face."""
    a = 0.02
    gx, gy = np.arange(-1.0, 1e-9, a), np.arange(-0.5, 0.5 + 1e-9, a)
    top = np.stack(np.meshgrid(gx, gy, indexing="ij"), -1).reshape(-1, 2)
    top = np.column_stack([top, np.full(len(top), 0.5)])
    gz = np.arange(0.0, 0.5, a)
    side = np.stack(np.meshgrid(gy, gz, indexing="ij"), -1).reshape(-1, 2)
    side = np.column_stack([np.zeros(len(side)), side])
    ball = _ball((-0.4, 0.0, 0.5 + 0.1 + 0.02), gravity=9.8)
    # frictionless (mu 0): a ball of a few affine handles slides rather than rolls, and Coulomb friction would stop
    # it within mu g / v^2 ~ 0.1 m (tests/test_contact.py::test_coulomb_friction_* is about friction)
    sysm = BodyContactSystem([ball], static_points=np.concatenate([top, side]), static_radius=0.02, mu=0.0)
    _set_velocity(ball, (1.0, 0.0, 0.0))
    z_on_top = []
    for _ in range(20):  # 0.4 s: over the top
        st = sysm.step()
        z_on_top.append(float(ball.positions()[:, 2].mean()))
    assert min(z_on_top) > 0.58  # supported: its centre stays about a radius above the top
    assert st.max_overlap < 0.01 * 0.2
    sysm.step(25)  # 0.5 s more: past the edge at x = 0
    x = ball.positions().numpy()
    assert x[:, 0].mean() > 0.2 and x[:, 2].max() < 0.5  # beyond the edge and below the top
    assert x[:, 0].min() > -0.02  # it did not pass through the side face


def test_a_head_on_push_passes_momentum_on():
    """Cube A at 1 m/s hits cube B at rest (no gravity, no floor): the total momentum is kept (implicit Euler with
    equal and opposite contact forces) and B leaves with most of it."""
    A, B = _cube((-0.3, 0.0, 0.0), gravity=0.0, damping=0.0), _cube((0.0, 0.0, 0.0), gravity=0.0, damping=0.0, seed=2)
    sysm = BodyContactSystem([A, B])
    _set_velocity(A, (1.0, 0.0, 0.0))
    p0 = sysm.momentum()
    sysm.step(30)  # 0.6 s: contact around 0.07 s
    p1 = sysm.momentum()
    assert p1[0] == pytest.approx(p0[0], rel=0.02)
    mA = A.total_mass
    vA = float((A.Phi @ A.qdot.T)[:, 0].mean())
    vB = float((B.Phi @ B.qdot.T)[:, 0].mean())
    assert vB > 0.5 and vA < 0.5 and vB > vA  # B took over the motion
    assert mA * vA + B.total_mass * vB == pytest.approx(p0[0], rel=0.03)
    assert sysm.max_overlap() < 0.01 * SIZE


def test_contact_hessian_is_psd_and_couples_only_bodies_in_contact():
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING))
    far = _cube((3.0, 0.0, 0.0), seed=3)
    sysm = BodyContactSystem([a, b, far], rest_pairs=NO_REST)
    ctxs = [_StepContext(h=sysm.dt, q_pred=x.q.clone(), q_prev=x.q.clone(), D=None) for x in (a, b, far)]
    qs = [x.q.clone() for x in (a, b, far)]
    fric = sysm._friction_pairs(*sysm._current(), sysm.dt)
    _, _, _, _, _, gn = sysm._joint(qs, ctxs, True, fric)
    n = int(sysm.offsets[-1])
    H = torch.zeros(n, n, dtype=torch.float64)
    sysm._contact_hessian(H, gn)
    # PSD up to the float32 products of the fast assembly (the reference, float64, to 1e-9)
    assert float(torch.linalg.eigvalsh(0.5 * (H + H.T)).min()) > -1e-6 * float(H.abs().max())
    R = torch.zeros_like(H)
    sysm._contact_hessian_reference(R, gn)
    assert float(torch.linalg.eigvalsh(R).min()) > -1e-9 * float(R.abs().max())
    o = sysm.offsets
    assert float(H[o[0]:o[1], o[1]:o[2]].abs().max()) > 0  # a and b coupled
    assert float(H[o[2]:, :o[2]].abs().max()) == 0 and float(H[o[2]:, o[2]:].abs().max()) == 0  # far: no terms


def test_contact_hessian_matches_the_per_pair_reference():
    """The fast assembly (isotropic + rank-one parts, one GEMM per body and per touching pair, float32 products)
    equals the plain per-pair reference on three bodies, two touching each other and one resting on a static
    collider, with contact and friction terms (float32 tolerance)."""
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING), seed=2)
    c = _cube((0.6, 0.0, 0.0), seed=3)
    g = np.linspace(-0.3, 0.3, 25)
    floor = np.stack(np.meshgrid(g + 0.6, g, indexing="ij"), -1).reshape(-1, 2)
    floor = np.c_[floor, np.full(len(floor), -SIZE / 2 - 0.3 * SPACING)]  # under c, overlapping its bottom layer
    sysm = BodyContactSystem([a, b, c], static_points=floor, rest_pairs=NO_REST)
    ctxs = [_StepContext(h=sysm.dt, q_pred=x.q.clone(), q_prev=x.q.clone(), D=None) for x in (a, b, c)]
    gen = torch.Generator().manual_seed(5)
    qs = [x.q + 0.001 * torch.randn(x.q.shape, generator=gen, dtype=torch.float64) for x in (a, b, c)]
    fric = sysm._friction_pairs(*sysm._current(), sysm.dt)
    _, _, _, pairs, _, gn = sysm._joint(qs, ctxs, True, fric)
    assert pairs.i.size > 10 and pairs.s_i.size > 10
    n = int(sysm.offsets[-1])
    H, R = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, n, dtype=torch.float64)
    sysm._contact_hessian(H, gn)
    sysm._contact_hessian_reference(R, gn)
    assert float(R.abs().max()) > 0
    assert torch.allclose(H, R, rtol=0, atol=2e-6 * float(R.abs().max()))
    assert torch.equal(H, H.T)


def test_verlet_pairs_are_the_exact_search():
    """The Verlet-list pairs (candidates within the contact distance + 2 skin at a reference state, rebuilt once a
    sample moved more than the skin) are exactly the direct search's, pairs and order, along a random walk of three
    bodies near each other and a static collider, with and without rebuilds."""
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING), seed=2)
    c = _ball((0.25, 0.0, 0.0), R=0.1, a=0.03)
    g = np.linspace(-0.4, 0.6, 30)
    floor = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    floor = np.c_[floor, np.full(len(floor), -SIZE / 2 - 0.2 * SPACING)]
    sysm = BodyContactSystem([a, b, c], static_points=floor)
    rng = np.random.default_rng(0)
    x = sysm.positions()
    rebuilt = 0
    for k in range(40):
        x = x + rng.normal(scale=0.15 * sysm.skin, size=x.shape)  # a drift that crosses the skin now and then
        before = sysm._verlet
        near, exact = sysm._pairs_near(x), sysm._pairs(x)
        rebuilt += sysm._verlet is not before
        for u, v in zip((near.i, near.j, near.s_i, near.s_j), (exact.i, exact.j, exact.s_i, exact.s_j)):
            assert np.array_equal(u, v)
    assert exact.i.size > 10 and exact.s_i.size > 10
    assert 2 <= rebuilt < 40


def test_a_body_touching_nothing_steps_exactly_as_alone():
    """A body that touches no other body and no collider is stepped by its own simulator inside the system: its
    trajectory is bit-for-bit the lone simulator's, while a far body falls beside it."""
    lone = _cube((0.0, 0.0, 0.3), gravity=9.8, floor_height=0.0)
    a = _cube((0.0, 0.0, 0.3), gravity=9.8, floor_height=0.0)
    far = _cube((2.0, 0.0, 0.5), gravity=9.8, floor_height=0.0, seed=3)
    sysm = BodyContactSystem([a, far])
    for _ in range(30):
        lone.step()
        sysm.step()
    assert torch.equal(lone.q, a.q)
    assert float(far.positions()[:, 2].mean()) < 0.5 - 0.1  # it fell too


def test_islands_give_the_joint_solve():
    """Two stacks apart (two islands, each solved alone) end where one joint Newton solve of all four bodies puts
    them (the same objective, each island converged to the tolerance): within 0.5 mm after 1.2 s of falling and
    landing."""
    def scene():
        return [_cube((0.0, 0.0, SIZE / 2 + 0.001), gravity=9.8, floor_height=0.0),
                _cube((0.02, 0.0, 1.5 * SIZE + 0.03), gravity=9.8, floor_height=0.0, seed=2),
                _cube((0.6, 0.0, SIZE / 2 + 0.001), gravity=9.8, floor_height=0.0, seed=3),
                _cube((0.61, 0.01, 1.5 * SIZE + 0.05), gravity=9.8, floor_height=0.0, seed=4)]

    split, joint = BodyContactSystem(scene()), BodyContactSystem(scene())
    joint._islands = lambda p: [tuple(range(joint.num_bodies))]
    calls = []
    sub = split._sub_system
    split._sub_system = lambda isl: calls.append(isl) or sub(isl)
    split.step(60)
    joint.step(60)
    assert (0, 1) in calls and (2, 3) in calls  # the stacks were solved apart
    for s, j in zip(split.bodies, joint.bodies):
        assert float((s.positions() - j.positions()).norm(dim=1).max()) < 5e-4


def _three_bodies_on_a_collider(native, rest=NO_REST):
    """Two overlapping cubes and one resting into a static floor patch, each iterate jittered (seeded); ``rest``:
    the system's rest pairs (None: those overlapping as built)."""
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING), seed=2)
    c = _cube((0.6, 0.0, 0.0), seed=3)
    g = np.linspace(-0.3, 0.3, 25)
    floor = np.stack(np.meshgrid(g + 0.6, g, indexing="ij"), -1).reshape(-1, 2)
    floor = np.c_[floor, np.full(len(floor), -SIZE / 2 - 0.3 * SPACING)]
    sysm = BodyContactSystem([a, b, c], static_points=floor, native=native, rest_pairs=rest)
    ctxs = [_StepContext(h=sysm.dt, q_pred=x.q.clone(), q_prev=x.q.clone(), D=None) for x in (a, b, c)]
    gen = torch.Generator().manual_seed(5)
    qs = [x.q + 0.001 * torch.randn(x.q.shape, generator=gen, dtype=torch.float64) for x in (a, b, c)]
    return sysm, ctxs, qs


@pytest.mark.parametrize("rest", [NO_REST, None], ids=["full radii", "touching at rest"])
def test_native_contact_terms_match_the_numpy_reference(rest):
    """The C kernel's pass (pairs, contact and friction energies, dE/dx, the deepest overlap) equals the numpy
    reference (_pairs_near, _contact, _friction) on bodies touching each other and a static collider, with friction
    pairs from the step's start, and the Newton gradient built from it is the same."""
    from physskin_gs.physics import _contact_native

    if not _contact_native.available():
        pytest.skip(f"no C kernel here: {_contact_native.unavailable_reason()}")
    out = {}
    for native in (False, True):
        sysm, ctxs, qs = _three_bodies_on_a_collider(native, rest)
        assert sysm.native == native and (sysm.rest_overlaps > 10) == (rest is None)
        fric = sysm._friction_pairs(*sysm._current(), sysm.dt)
        E, evs, x, pairs, gx, gn = sysm._joint(qs, ctxs, True, fric)
        E0 = sysm._joint(qs, ctxs, False, fric)[0]
        so = sysm.offsets_samples
        grads = [bd._gradient(ev, c, gx[so[k]:so[k + 1]]) for k, (bd, ev, c) in enumerate(zip(sysm.bodies, evs, ctxs))]
        out[native] = (E, E0, pairs, np.asarray(gx), grads, list(gn), sysm.max_overlap(x), sysm, x, fric)
    ref, fast = out[False], out[True]
    # the friction pairs (kernel: one pass; reference: numpy per block) are the same, patch normals included
    fb, rb = fast[9]["blocks"], ref[9]["blocks"]
    assert [b[0] for b in fb] == [b[0] for b in rb] == ["bb", "bs"]
    for f, r in zip(fb, rb):
        np.testing.assert_array_equal(f[1], r[1])
        assert (f[2] is None) == (r[2] is None) and (f[2] is None or np.array_equal(f[2], r[2]))
        for a, b in zip(f[3:], r[3:]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(np.abs(b).max()))
    assert ref[2].i.size > 10 and ref[2].s_i.size > 10
    for f in ("i", "j", "s_i", "s_j"):
        np.testing.assert_array_equal(getattr(fast[2], f), getattr(ref[2], f))
    assert fast[0] == pytest.approx(ref[0], rel=1e-13) and fast[1] == pytest.approx(ref[1], rel=1e-13)
    scale = np.abs(ref[3]).max()
    assert scale > 0
    np.testing.assert_allclose(fast[3], ref[3], rtol=0, atol=1e-12 * scale)
    for gf, gr in zip(fast[4], ref[4]):
        torch.testing.assert_close(gf, gr, rtol=0, atol=1e-12 * float(gr.abs().max()))
    assert len(fast[5]) == len(ref[5]) == 4  # contact and friction entries, body-body and body-static
    # the deepest overlap the kernel measured is the one max_overlap computes from the pairs
    fast_sys, x = fast[7], fast[8]
    assert fast[2].deepest == pytest.approx(ref[6], rel=1e-12)
    assert fast[2].deepest == pytest.approx(BodyContactSystem.max_overlap(fast_sys, x), rel=1e-12)


def test_native_contact_terms_refuse_a_stale_verlet_list():
    """A sample that moved the skin or more from the Verlet list's reference makes the kernel compute nothing and
    say so (the caller rebuilds the list), and wrong shapes are refused."""
    from physskin_gs.physics import _contact_native

    if not _contact_native.available():
        pytest.skip(f"no C kernel here: {_contact_native.unavailable_reason()}")
    sysm, ctxs, qs = _three_bodies_on_a_collider(True)
    x = np.ascontiguousarray(sysm.positions())
    v = sysm._verlet_list(x)
    assert _contact_native.contact_terms(x, v, None, None, 1e6, 1.0, True) is not None
    moved = x.copy()
    moved[7, 2] += v["skin"] * 1.01
    assert _contact_native.contact_terms(moved, v, None, None, 1e6, 1.0, True) is None
    with pytest.raises(ValueError):
        _contact_native.contact_terms(x[:-1].copy(), v, None, None, 1e6, 1.0, True)
    with pytest.raises(ValueError):
        _contact_native.contact_terms(np.asfortranarray(x), v, None, None, 1e6, 1.0, True)


def test_negligible_correction_is_the_rms_sample_displacement():
    """The displacement test (IPC's, RMS over a body's samples) says 'negligible' exactly when every body's RMS
    sample displacement sqrt(mean |Phi_i dq|^2) is below STEP_TOL x its size: the batched form (bodies of one
    handle count) and the per-body loop agree with the direct sum over samples, just below and above."""
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.5, 0.0, 0.0), seed=2)
    sysm = BodyContactSystem([a, b])
    assert sysm._gram_stack is not None
    g = torch.Generator().manual_seed(4)
    delta = torch.randn(int(sysm.offsets[-1]), generator=g, dtype=torch.float64)
    rms = []
    for k, body in enumerate((a, b)):
        dq = delta[sysm.offsets[k]:sysm.offsets[k + 1]].view(3, -1)
        rms.append(float(((body.Phi @ dq.T) ** 2).sum(1).mean().sqrt()) / sysm._sizes[k])
    scale = sysm.STEP_TOL / max(rms)  # the largest body's RMS exactly at the tolerance
    for stack in (sysm._gram_stack, None):
        sysm._gram_stack = stack
        assert sysm._negligible(0.999 * scale * delta) and not sysm._negligible(1.001 * scale * delta)


def test_static_points_of_any_layout_are_accepted():
    """Static collider points given as a transposed (Fortran-ordered) array step exactly like the same points in
    C order (the C kernel needs contiguous rows; the system makes its own copy)."""
    g = np.linspace(-0.3, 0.3, 13)
    floor = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    floor = np.c_[floor, np.full(len(floor), -SIZE / 2 - 0.3 * SPACING)]
    runs = []
    for pts in (floor, np.asfortranarray(floor)):
        sysm = BodyContactSystem([_cube((0.0, 0.0, 0.0))], static_points=pts)
        for _ in range(3):
            sysm.step()
        runs.append(sysm.bodies[0].positions())
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("far, extra, holds", [(10.0, 4, True), (float("inf"), 1, False)])
def test_a_joint_step_far_from_balance_iterates_on(far, extra, holds, monkeypatch):
    """The joint solve keeps the bodies' own rule: a step still far from balance after its Newton budget (here one
    iteration, a poor budget for an impact) iterates on, up to 4x the budget, and one that ends there is halved. A
    cube dropped from 0.15 m on a cube then lands with its contact spheres at most 2 % of its size into the other's
    (measured 1.2 %, the 8-iteration default 1.2 %); taking such steps as they came (far = inf, no extra
    iterations) let them sink 5 % in (measured 5.2 %)."""
    monkeypatch.setattr(SubspaceSimulator, "FAR_RESIDUAL", far)
    monkeypatch.setattr(SubspaceSimulator, "NEWTON_EXTRA", extra)
    lower = _turned_cube((0.0, 0.0, SIZE / 2 + 0.001), 0.0, gravity=9.8, floor_height=0.0, friction=40.0)
    upper = _turned_cube((0.03, 0.0, 0.45), 0.3, gravity=9.8, floor_height=0.0, seed=2, friction=40.0)
    sysm = BodyContactSystem([lower, upper], newton_iters=1)
    worst = max(sysm.step().max_overlap for _ in range(60))
    top_face, bottom_face = _faces(lower, upper)
    if holds:
        assert worst < 0.02 * SIZE and abs(bottom_face - top_face) < 0.01 * SIZE, (worst, bottom_face - top_face)
    else:
        assert worst > 0.035 * SIZE, worst


def test_the_packed_factor_solves_as_the_square_one():
    """The joint Hessian's factor is kept packed (half the bytes, streamed twice per Newton correction): its solve
    equals the square float32 factor's (the reference) to float32 rounding on a random SPD system of 408 unknowns
    (two bodies of 17 handles), and a dropped stack of two cubes steps to the same positions (0.1 mm in 40 steps;
    the two factors round differently)."""
    from physskin_gs.physics.contact import _PackedCholesky, _solve

    g = torch.Generator().manual_seed(3)
    A = torch.randn(408, 408, generator=g, dtype=torch.float64)
    L = torch.linalg.cholesky(A @ A.T + 408.0 * torch.eye(408, dtype=torch.float64))
    b = torch.randn(408, generator=g, dtype=torch.float64)
    x_sq = _solve(L.to(torch.float32), b)
    x_pk = _solve(_PackedCholesky(L), b)
    x64 = torch.cholesky_solve(b[:, None], L)[:, 0]
    assert x_pk.dtype == torch.float64 and float((x_pk - x_sq).norm() / x_sq.norm()) < 1e-5
    assert float((x_pk - x64).norm() / x64.norm()) < 1e-5

    def stack():
        return [_cube((0.0, 0.0, SIZE / 2 + 0.001), gravity=9.8, floor_height=0.0),
                _cube((0.02, 0.0, 1.5 * SIZE + 0.03), gravity=9.8, floor_height=0.0, seed=2)]

    packed, square = BodyContactSystem(stack()), BodyContactSystem(stack())
    square.PACKED_FACTOR = False
    packed.step(40)
    square.step(40)
    assert isinstance(packed._L, _PackedCholesky) and isinstance(square._L, torch.Tensor)
    for p, s in zip(packed.bodies, square.bodies):
        assert float((p.positions() - s.positions()).norm(dim=1).max()) < 1e-4


def test_a_settled_stack_rests_without_newton_iterations():
    """A stack of two cubes that has come to rest steps on without a Newton iteration: each step's first correction
    moves no sample measurably and is applied (the step ends at the corrected iterate, evaluated there), so the
    velocity error it carries does not build up into a slow rocking of the stack. With the correction dropped (the
    step kept the inertial prediction, ``APPLY_NEGLIGIBLE`` off) the same 50 steps took 24 iterations and the
    fastest sample moved at 0.94 mm/s; applied: none, 0.53 mm/s."""
    def settled(apply: bool):
        lower = _turned_cube((0.0, 0.0, SIZE / 2 + 0.001), 0.0, gravity=9.8, floor_height=0.0, friction=40.0)
        upper = _turned_cube((0.03, 0.0, 1.5 * SIZE + 0.02), 0.6, gravity=9.8, floor_height=0.0, seed=2,
                             friction=40.0)
        sysm = BodyContactSystem([lower, upper])
        sysm.APPLY_NEGLIGIBLE = apply
        sysm.step(150)
        return sysm

    out = {}
    for apply in (True, False):
        sysm = settled(apply)
        iters, vmax = 0, 0.0
        for _ in range(50):
            st = sysm.step()
            iters += st.newton_iters
            vmax = max(vmax, max(float(np.linalg.norm((b.Phi @ b.qdot.T).numpy(), axis=1).max())
                                 for b in sysm.bodies))
        out[apply] = (iters, vmax)
    assert out[True][0] == 0 and out[True][1] < 7.5e-4, out  # at rest: no iteration, under 0.75 mm/s
    assert out[False][0] > 0 and out[False][1] > out[True][1], out  # the reference drifts and corrects


def test_a_refresh_keeping_the_elastic_parts_steps_as_the_reference():
    """A poor joint factor refreshed within a step keeps the bodies' elastic parts (the GEMM over every cubature
    point, most of a refresh) and recomputes the contact part: a cube dropped on a cube steps to the same positions
    as with every refresh recomputing them (0.1 mm in 60 steps, as the Newton tolerance allows), with fewer
    elastic Hessians computed."""
    def stack():
        return [_cube((0.0, 0.0, SIZE / 2 + 0.001), gravity=9.8, floor_height=0.0, friction=40.0),
                _cube((0.02, 0.0, 1.5 * SIZE + 0.03), gravity=9.8, floor_height=0.0, seed=2, friction=40.0)]

    counts = {}
    ends = {}
    for keep in (True, False):
        sysm = BodyContactSystem(stack())
        sysm.KEEP_ELASTIC = keep
        n = [0]
        for b in sysm.bodies:
            orig = b._elastic_hessian

            def counted(*a, _orig=orig, **kw):
                n[0] += 1
                return _orig(*a, **kw)
            b._elastic_hessian = counted
        sysm.step(60)
        counts[keep], ends[keep] = n[0], [b.positions() for b in sysm.bodies]
    assert counts[True] < counts[False], counts
    for p, s in zip(ends[True], ends[False]):
        assert float((p - s).norm(dim=1).max()) < 1e-4



# ------------------------------------------------------------------------------------------ frozen bodies
def test_a_frozen_body_holds_still_and_a_body_dropped_on_it_rests_on_top():
    """A cube frozen in mid-air (gravity on, no floor under it) keeps its pose exactly and has no velocity while a
    cube dropped on it lands and comes to rest on its top face (within 1 % of the size, no overlap deeper than 1 %);
    unfrozen, it falls as implicit Euler from rest says: h^2 g n (n + 1) / 2 after n steps (0.216 m after 10)."""
    lower = _turned_cube((0.0, 0.0, 0.5), 0.0, gravity=9.8, friction=40.0)
    upper = _turned_cube((0.03, 0.0, 0.5 + SIZE + 0.1), 0.6, gravity=9.8, seed=2, friction=40.0)
    lower.set_frozen(True)
    q0 = lower.q.clone()
    sysm = BodyContactSystem([lower, upper])
    sysm.step(150)
    st = sysm.step(20)
    assert torch.equal(lower.q, q0) and float(lower.qdot.abs().max()) == 0.0
    assert st.pairs_body >= 3
    top_face, bottom_face = _faces(lower, upper)
    assert abs(bottom_face - top_face) < 0.01 * SIZE, (bottom_face, top_face)
    assert st.max_overlap < 0.01 * SIZE
    upper.set_frozen(True)  # both frozen: nothing moves, the contact stays as it is
    qu = upper.q.clone()
    sysm.step(5)
    assert torch.equal(upper.q, qu) and torch.equal(lower.q, q0)
    upper.set_frozen(False)
    lower.set_frozen(False)
    z0 = float(lower.positions()[:, 2].mean())
    sysm.step(10)
    drop = z0 - float(lower.positions()[:, 2].mean())
    assert drop == pytest.approx(sysm.dt ** 2 * 9.8 * 55, rel=0.03), drop


def test_a_frozen_body_is_the_static_collider_of_its_samples():
    """Against a frozen cube a moving cube steps as against a static point collider made of the frozen cube's
    samples with its contact radius (friction off, equal sample masses: the same contact energy): within 0.1 mm
    over 40 steps of a sideways slide into it and back (measured 0.034 mm: the two solves stop at their tolerances
    by different paths; the impact's velocity is 0.8 m/s)."""
    def mover():
        b = _cube((-SIZE - 0.02, 0.0, 0.0), gravity=0.0, friction=0.0, seed=2)
        _set_velocity(b, (0.8, 0.0, 0.0))
        return b

    wall = _cube((0.0, 0.0, 0.0), gravity=0.0, friction=0.0)
    wall.set_frozen(True)
    a = mover()
    joint = BodyContactSystem([wall, a], mu=0.0)
    b = mover()
    r = default_contact_radius(wall.X)
    ref = BodyContactSystem([b], radii=[r], static_points=wall.positions().numpy(), static_radius=r, mu=0.0)
    touched = False
    for _ in range(40):
        st = joint.step()
        ref.step()
        touched |= st.pairs_body > 0
        assert float((a.positions() - b.positions()).norm(dim=1).max()) < 1e-4
    assert touched
    vx = float((a.Phi @ a.qdot.T)[:, 0].mean())
    assert vx < 0.0  # it bounced back off the frozen cube


def test_per_body_step_times_follow_the_islands():
    """``ContactStats.body_ms`` gives each body the time of the solves it took part in: two bodies apart are
    solved apart (each its own time), two touching together (the same time for both); ``solved_together`` names
    the groups."""
    a, b = _cube((0.0, 0.0, 0.5), gravity=9.8), _cube((1.0, 0.0, 0.5), gravity=9.8, seed=2)
    st = BodyContactSystem([a, b]).step(3)
    assert st.solved_together == [(0,), (1,)]
    assert all(v > 0 for v in st.body_ms) and sum(st.body_ms) <= st.ms
    a, b = _cube((0.0, 0.0, 0.0)), _cube((0.01, 0.005, SIZE - 0.3 * SPACING), seed=2)
    far = _cube((3.0, 0.0, 0.0), seed=3)
    st = BodyContactSystem([a, b, far]).step(2)
    assert st.solved_together == [(0, 1), (2,)]
    assert st.body_ms[0] == st.body_ms[1] > 0 and st.body_ms[2] > 0
    assert st.as_dict()["solved_together"] == [[0, 1], [2]]



def _halves(overlap: float, **kw):
    """Two halves of one 0.2 m block cut across z (8^3 samples each, the upper lattice turned, as two captured
    bodies' points never line up), whose samples overlap by ``overlap`` x the spacing at the cut (as the fills of
    two selection boxes cutting one object do), the lower one standing on the floor."""
    n = 8
    lower = _turned_cube((0.0, 0.0, SIZE / 2 + 0.001), 0.0, n=n, gravity=9.8, floor_height=0.0, friction=40.0, **kw)
    upper = _turned_cube((0.0, 0.0, 1.5 * SIZE + 0.001 - overlap * SIZE / n), 0.4, n=n, gravity=9.8,
                         floor_height=0.0, seed=2, friction=40.0, **kw)
    return lower, upper


def _relative_move(lower, upper, l0, u0) -> np.ndarray:
    """(3,) mean displacement of the upper half less the lower half's (m) since positions l0, u0."""
    return ((upper.positions() - u0).mean(0) - (lower.positions() - l0).mean(0)).numpy()


def test_bodies_touching_as_they_start_rest_as_they_are():
    """Two halves of a block whose samples overlap by 0.8 of a spacing at the cut (pairs up to 0.8 of a contact
    distance deep): with the overlapping pairs at their rest distances the upper half stays on the lower one (it
    settles by less than 2 % of its size under its weight, measured 1.0 %, and does not slide); at full radii the
    same start pushes it off by 10 % (on a captured card box cut by two selection boxes, which overlap by up to
    a whole contact distance, the upper part flew 5 m)."""
    moved = {}
    for rest in (None, NO_REST):
        lower, upper = _halves(0.8)
        sysm = BodyContactSystem([lower, upper], rest_pairs=rest)
        l0, u0 = lower.positions().clone(), upper.positions().clone()
        sysm.step(50)
        moved["rest" if rest is None else "full"] = _relative_move(lower, upper, l0, u0)
        if rest is None:
            assert sysm.rest_overlaps > 100
            assert sysm.max_overlap() < 0.01 * SIZE  # measured against the rest distances
    assert np.abs(moved["rest"]).max() < 0.02 * SIZE, moved
    assert moved["full"][2] > 0.05 * SIZE, moved


def test_bodies_touching_at_rest_still_resist_being_pushed_together():
    """The rest distance holds a touching pair apart at full stiffness: the upper half pressed into the lower one
    at 0.5 m/s comes within 3 % of the block's size of it (measured 2.3 %; halves that start 0.1 spacing apart,
    with no rest pairs, 2.6 %: the soft halves' own compression), with no pair overlapping past its rest distance
    by more than 1 %."""
    lower, upper = _halves(0.8)
    sysm = BodyContactSystem([lower, upper])
    l0, u0 = lower.positions().clone(), upper.positions().clone()
    _set_velocity(upper, (0.0, 0.0, -0.5))
    deepest, low = 0.0, 0.0
    for _ in range(30):
        st = sysm.step(1)
        deepest = max(deepest, st.max_overlap)
        low = min(low, float(_relative_move(lower, upper, l0, u0)[2]))
    assert low > -0.03 * SIZE, low
    assert deepest < 0.01 * SIZE


def test_an_island_keeps_the_rest_distances_of_its_pairs():
    """A sub-system of an island (stepped alone while another body is apart) carries its pairs' rest distances in
    its own numbering, so the halves rest with a third, distant body in the scene as they do alone."""
    lower, upper = _halves(0.8)
    far = _cube((3.0, 0.0, SIZE / 2 + 0.001), gravity=9.8, floor_height=0.0, seed=3)
    sysm = BodyContactSystem([far, lower, upper])
    l0, u0 = lower.positions().clone(), upper.positions().clone()
    sysm.step(50)
    assert sysm.rest_overlaps > 100
    subs = [s for isl, s in sysm._subs.items() if set(isl) == {1, 2}]
    assert subs and subs[0].rest_overlaps == sysm.rest_overlaps
    assert np.abs(_relative_move(lower, upper, l0, u0)).max() < 0.02 * SIZE
