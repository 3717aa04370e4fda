"""Large programs as libraries built on jax write them, lowered for CUDA without a device.

The corpora's programs are small and the flax models are straight-line training steps;
what the library sweeps of docs/reliability.md compiled slowest were programs with many
while loops and computations: a physics engine's gradient, a cosmology code's Fisher
matrix, an ODE solver's adjoint, an MCMC kernel's steps. Each builder here returns one
such program's HLO text (jax 0.10.2, ``lowering_platforms=("cuda",)``, every constant in
full). ``library_compile.py`` times heron's whole compile of them beside XLA:GPU's.

Needs the libraries, in an environment with jax 0.10.2 (heron need not be installed
there)::

    pip install "jax==0.10.2" brax==0.14.2 jax-cosmo==0.1.0 diffrax==0.7.2 \\
        numpyro==0.22.0 blackjax==1.7.1 sax==0.16.14

Run ``python benchmarks/library_programs.py OUT_DIR [--only NAME,...]`` to write each
program as ``OUT_DIR/NAME.hlo`` (what ``library_compile.py --hlo-dir`` reads); with
``--io`` also its arguments and XLA:CPU's results (``NAME.inputs.npz``,
``NAME.outputs.npz``), which ``nox -s library`` (tests/library) checks heron's against.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchlib.selection import selected


@dataclass(frozen=True)
class LibraryProgram:
    """A library's function and the arguments it is called with, as a user jits it."""

    function: Callable
    arguments: tuple

    def hlo(self) -> str:
        """The function lowered for CUDA at its arguments: the HLO text jax hands XLA:GPU."""
        return self._lowered.compiler_ir("hlo").as_hlo_text(print_large_constants=True)

    def inputs(self) -> list:
        """The argument leaves the entry takes, in parameter order: ``jax.tree.leaves``
        less those jit drops as unused. (``keep_unused`` would keep them, but it also keeps
        the dead code of the outermost function: a tenth of brax's module, half of sax's.)"""
        import jax
        import numpy as np

        leaves = jax.tree.leaves(self.arguments)
        kept = sorted(self._lowered._lowering.compile_args["kept_var_idx"])
        return [np.asarray(leaves[i]) for i in kept]

    @functools.cached_property
    def _lowered(self):
        """Traced and lowered once: the HLO and the kept arguments both read it (brax's
        gradient takes seconds to trace)."""
        import jax

        traced = jax.jit(self.function).trace(*self.arguments)
        return traced.lower(lowering_platforms=("cuda",))

    def outputs(self) -> list:
        """What XLA:CPU computes (jax on this machine's CPU), the result's leaves in the
        order of the entry's flattened result."""
        import jax
        import numpy as np

        with jax.default_device(jax.devices("cpu")[0]):
            result = jax.jit(self.function)(*self.arguments)
        return [np.asarray(leaf) for leaf in jax.tree.leaves(result)]


def _program(function, *arguments) -> LibraryProgram:
    return LibraryProgram(function, arguments)


def brax_ant_grad() -> LibraryProgram:
    """The gradient of brax's ant (generalized pipeline) reward through three physics
    steps with respect to the actions."""
    import jax
    import jax.numpy as jnp
    from brax import envs

    env = envs.get_environment("ant", backend="generalized")
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))

    def loss(actions, state):
        def step(carry, action):
            carry = env.step(carry, action)
            return carry, carry.reward

        _, rewards = jax.lax.scan(step, state, actions)
        return jnp.sum(rewards)

    actions = jnp.zeros((3, env.action_size), jnp.float32)
    return _program(jax.grad(loss), actions, state)


def jax_cosmo_fisher() -> LibraryProgram:
    """A Fisher matrix of two weak-lensing bins' angular power spectra (halofit, Eisenstein
    and Hu) with respect to five cosmological parameters, by ``jax.jacfwd``."""
    import jax
    import jax.numpy as jnp
    import jax_cosmo as jc

    nz1 = jc.redshift.smail_nz(1.0, 2.0, 1.0)
    nz2 = jc.redshift.smail_nz(1.0, 2.0, 0.5)
    tracers = [jc.probes.WeakLensing([nz1, nz2], sigma_e=0.26)]
    ell = jnp.logspace(1, 3, 10)

    def mean(params):
        cosmo = jc.Planck15(
            Omega_c=params[0], Omega_b=params[1], h=params[2], n_s=params[3], sigma8=params[4]
        )
        return jc.angular_cl.angular_cl(cosmo, ell, tracers).flatten()

    def fisher(params):
        signal = mean(params).reshape(3, -1)
        noise = jc.angular_cl.noise_cl(ell, tracers)
        cov = jc.angular_cl.gaussian_cl_covariance(ell, tracers, signal, noise, sparse=False)
        jacobian = jax.jacfwd(mean)(params)
        return jacobian.T @ jnp.linalg.solve(cov, jacobian)

    params = jnp.array([0.2545, 0.0485, 0.682, 0.971, 0.801], jnp.float32)
    return _program(fisher, params)


def diffrax_neural_ode_grad() -> LibraryProgram:
    """A neural ODE's loss gradient through diffrax's adaptive Tsit5 solve (a PID step
    controller, ``RecursiveCheckpointAdjoint``: nested while loops and checkpoints)."""
    import os

    os.environ.setdefault("EQX_ON_ERROR", "nan")  # no host callbacks
    import diffrax
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {
        "w1": jax.random.normal(k1, (8, 64)) * 0.3,
        "w2": jax.random.normal(k2, (64, 64)) * 0.1,
        "w3": jax.random.normal(k3, (64, 8)) * 0.1,
    }

    def vector_field(t, y, p):
        h = jnp.tanh(y @ p["w1"])
        h = jnp.tanh(h @ p["w2"])
        return h @ p["w3"] - 0.1 * y

    def loss(p, y0):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            diffrax.Tsit5(),
            t0=0.0,
            t1=2.0,
            dt0=0.05,
            y0=y0,
            args=p,
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 2.0, 16)),
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6),
            max_steps=256,
            throw=False,  # equinox's runtime check is a host callback, which no GPU compile takes
        )
        return jnp.mean(solution.ys**2)

    y0 = jnp.ones((32, 8), jnp.float32)
    return _program(jax.grad(loss), params, y0)


def numpyro_nuts_schools() -> LibraryProgram:
    """Ten NUTS samples of numpyro's eight-schools model (non-centred), warm-up adapting the
    step size and mass matrix: a while loop of trees built by while loops."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    sigma = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    observed = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])

    def model(sigma, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
        with numpyro.plate("J", sigma.shape[0]):
            theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
            numpyro.sample("obs", dist.Normal(mu + tau * theta, sigma), obs=y)

    def run(key):
        mcmc = MCMC(NUTS(model), num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(key, sigma, y=observed)
        return mcmc.get_samples()

    # MCMC.run jits its own steps; trace through them by running it under jit here.
    return _program(run, jax.random.PRNGKey(0))


def blackjax_nuts_logistic() -> LibraryProgram:
    """Twenty blackjax NUTS steps of a Bayesian logistic regression (200 points, 16
    features) under ``lax.scan``."""
    import blackjax
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    kx, ky = jax.random.split(key)
    x = jax.random.normal(kx, (200, 16))
    y = (jax.random.uniform(ky, (200,)) < 0.5).astype(jnp.float32)

    def logdensity(w):
        logits = x @ w
        prior = -0.5 * jnp.sum(w**2)
        return prior + jnp.sum(y * logits - jnp.logaddexp(0.0, logits))

    nuts = blackjax.nuts(logdensity, step_size=0.1, inverse_mass_matrix=jnp.ones(16))

    def run(key, w0):
        state = nuts.init(w0)

        def one(state, key):
            state, info = nuts.step(key, state)
            return state, state.position

        _, positions = jax.lax.scan(one, state, jax.random.split(key, 20))
        return positions

    return _program(run, key, jnp.zeros(16, jnp.float32))


def expn_grad() -> LibraryProgram:
    """``jax.scipy.special.expn`` and its gradient over a vector: 54 while loops."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import expn

    def f(n, x):
        return jnp.sum(expn(n, x))

    def both(n, x):
        return expn(n, x), jax.grad(f, argnums=1)(n, x)

    return _program(both, jnp.arange(1, 65, dtype=jnp.int32) % 5, jnp.linspace(0.1, 4.0, 64))


def sax_mzi_lattice() -> LibraryProgram:
    """sax's S-matrix of a four-stage Mach-Zehnder lattice (84 ports once its couplers and
    waveguides are flattened) over 80 wavelengths, with the pure-jax
    ``filipsson_gunnar`` backend: the eighteenth sweep's slowest compile (58 s, XLA:CPU's
    jax.jit 5.7 s), multi-output fusion building siblings of fusions near the size limit."""
    import jax.numpy as jnp
    import numpy as np
    import sax

    instances: dict[str, str] = {}
    connections: dict[str, str] = {}
    for i in range(4):
        instances |= {f"c{i}": "coupler", f"t{i}": "straight", f"b{i}": "straight"}
        connections |= {f"c{i},out1": f"t{i},in0", f"c{i},out0": f"b{i},in0"}
        if i > 0:
            connections |= {f"t{i - 1},out0": f"c{i},in1", f"b{i - 1},out0": f"c{i},in0"}
    instances["cf"] = "coupler"
    connections |= {"t3,out0": "cf,in1", "b3,out0": "cf,in0"}
    ports = {"in0": "c0,in0", "in1": "c0,in1", "out0": "cf,out0", "out1": "cf,out1"}
    netlist = {"instances": instances, "connections": connections, "ports": ports}
    models = {"coupler": sax.models.coupler, "straight": sax.models.straight}
    circuit, _ = sax.circuit(netlist, models, backend="filipsson_gunnar")

    def power(wl, lengths):
        settings = {f"t{i}": {"length": lengths[i]} for i in range(4)}
        settings |= {f"b{i}": {"length": 10.0} for i in range(4)}
        return jnp.abs(circuit(wl=wl, **settings)["in0", "out0"]) ** 2

    wavelengths = np.linspace(1.5, 1.6, 80).astype(np.float32)
    return _program(power, wavelengths, np.array([12.0, 14.0, 16.0, 18.0], np.float32))


PROGRAMS: dict[str, Callable[[], LibraryProgram]] = {
    "brax_ant_grad": brax_ant_grad,
    "jax_cosmo_fisher": jax_cosmo_fisher,
    "diffrax_neural_ode_grad": diffrax_neural_ode_grad,
    "numpyro_nuts_schools": numpyro_nuts_schools,
    "blackjax_nuts_logistic": blackjax_nuts_logistic,
    "expn_grad": expn_grad,
    "sax_mzi_lattice": sax_mzi_lattice,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for NAME.hlo")
    parser.add_argument("--only", help="comma-separated program names")
    parser.add_argument(
        "--io",
        action="store_true",
        help="also NAME.inputs.npz (the arguments) and NAME.outputs.npz (XLA:CPU's results),"
        " in heron's npz convention (needs heron's HLO package)",
    )
    args = parser.parse_args(argv)
    names = selected(parser, args.only, PROGRAMS, "program")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        program = PROGRAMS[name]()
        text = program.hlo()
        (args.out / f"{name}.hlo").write_text(text)
        if args.io:
            from heron.hlo.npz_io import save_inputs, save_outputs

            save_inputs(args.out / f"{name}.inputs.npz", program.inputs())
            save_outputs(args.out / f"{name}.outputs.npz", program.outputs())
        whiles = text.count(" while(")
        computations = sum(
            1 for line in text.splitlines() if line.endswith("{") and not line.startswith(" ")
        )
        lines = len(text.splitlines())
        print(f"{name}: {lines} lines, {whiles} while loops, {computations} computations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
