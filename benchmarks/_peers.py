"""Static checks that the benchmarks' peers are written as their experts write them.

Used by ``tests/test_bench_peers.py`` (standard library only: no peer library has to be
installed for these checks to run).

KeOps (:func:`keops_problems`). Every KeOps reduction in ``benchmarks/*.py`` must reduce an
expression that itself calls ``.auto_factorize()``:
``t = D.sqnorm2().rsqrt(); t.concat(t*t*t*D).auto_factorize().sum(axis=1)``. KeOps 2.3 added the
``factorize``/``auto_factorize`` methods of ``LazyTensor`` for intermediate variables
(https://github.com/getkeops/keops/blob/v2.3/CHANGELOG.md; the ``LazyTensor.auto_factorize``
docstring in ``pykeops/common/lazy_tensor.py``; KeOps' own use in
``keopscore/sandbox/laplacian.py``: ``K(x - y).laplacian(x).auto_factorize().sum_reduction(axis=1)``).
Setting the module flag ``keopscore.auto_factorize = True`` instead does not count (with it the
generated C++ of the formula above evaluated ``rsqrt`` once per occurrence of ``t``), and the
check reports such an assignment too, so that nobody relies on it again.

The check is an AST analysis per function: a name is a KeOps expression if it is assigned from a
call of a KeOps constructor imported from ``pykeops`` (``LazyTensor``, ``Vi``, ``Vj``, ``Pm``), from
a call of a method only ``LazyTensor`` has (``.sqnorm2()``, ``.sqdist(...)``, ...), or from an
expression built on such a name (arithmetic, method chains, indexing, function calls with such
an argument); the result of a reduction is an array, not a KeOps expression. A
reduction is ``.sum(axis)`` / ``.min``/``.max``/``.logsumexp``/... with an axis that is 0 or 1
(or not a literal), or any ``.*_reduction(...)`` / ``.Kmin``/``.argKmin``/``.sumsoftmaxweight``;
``.sum(-1)`` is KeOps' vector sum, not a reduction. Its receiver must be a call of
``.auto_factorize()`` or a name assigned from one.

torch (:func:`torch_problems`). A torch peer of a training step must exist in eager and in
``torch.compile`` form and use ``torch.optim.Adam(..., fused=...)``; the module must declare the
allocator environment (``ALLOC_ENV`` with ``MALLOC_ARENA_MAX``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_MMAP_MAX_``) under which both sides run.
"""
from __future__ import annotations

import ast
from pathlib import Path

#: KeOps constructors (imported from a ``pykeops`` module) that start a KeOps expression.
KEOPS_CONSTRUCTORS = frozenset({"LazyTensor", "Vi", "Vj", "Pm", "ComplexLazyTensor"})
#: Methods that reduce over i or j when their axis is 0 or 1 (else: a vector operation).
AXIS_REDUCTIONS = frozenset({"sum", "min", "max", "argmin", "argmax", "min_argmin", "max_argmax",
                             "logsumexp", "lse"})
#: Methods that are reductions whatever their arguments.
ALWAYS_REDUCTIONS = frozenset({"Kmin", "argKmin", "Kmin_argKmin", "sumsoftmaxweight", "logsumexp_reduction"})
#: ``LazyTensor`` methods that NumPy arrays and torch tensors do not have: a call of one of them
#: makes its result a KeOps expression even when its receiver is, say, a function parameter.
KEOPS_ONLY_METHODS = frozenset({"sqnorm2", "sqdist", "norm2", "weightedsqnorm", "weightedsqdist", "matvecmult",
                                "vecmatmult", "tensorprod", "laplacian", "factorize", "auto_factorize",
                                "grad_matrix", "trace_operator", "keops_kron"})
#: The allocator settings a torch benchmark must declare (``ALLOC_ENV``).
ALLOC_KEYS = ("MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_")


def _is_reduction(call: ast.Call) -> bool:
    """True if ``call`` is ``<expr>.<reduction>(...)`` in KeOps' sense (see the module docstring)."""
    if not isinstance(call.func, ast.Attribute):
        return False
    name = call.func.attr
    if name.endswith("_reduction") or name in ALWAYS_REDUCTIONS:
        return True
    if name not in AXIS_REDUCTIONS:
        return False
    axis = next((kw.value for kw in call.keywords if kw.arg in ("axis", "dim")), None)
    if axis is None and call.args:
        axis = call.args[0]
    if axis is None:
        return False                          # default axis -1: the vector sum / min / max
    try:
        value = ast.literal_eval(axis)
    except ValueError:
        return True                           # not a literal: could be a reduction, check it
    return value in (0, 1)


def _constructors(tree: ast.AST) -> set:
    """Names bound to KeOps constructors by ``from pykeops... import ...`` anywhere in the module."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pykeops":
            for alias in node.names:
                if alias.name in KEOPS_CONSTRUCTORS:
                    out.add(alias.asname or alias.name)
    return out


class _Scope:
    """KeOps-expression and factorised names of one function (or the module body)."""

    def __init__(self, body, ctors, outer=()):
        self.ctors = ctors
        self.keops = set(outer)
        self.factorised = set()
        assigns = [n for stmt in body for n in _walk_no_nested(stmt)
                   if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))]
        changed = True
        while changed:                                     # flow-insensitive fixpoint
            changed = False
            for a in assigns:
                value = a.value
                if value is None:
                    continue
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                names = [t.id for tg in targets for t in ast.walk(tg) if isinstance(t, ast.Name)]
                if self.is_keops(value):
                    new = set(names) - self.keops
                    if new:
                        self.keops |= new
                        changed = True
                if _is_factorise_call(value):
                    new = set(names) - self.factorised
                    if new:
                        self.factorised |= new
                        changed = True

    def is_keops(self, node) -> bool:
        """True if ``node`` evaluates to a KeOps expression (a ``LazyTensor``) in this scope."""
        if isinstance(node, ast.Name):
            return node.id in self.keops
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                if node.func.id in self.ctors:
                    return True
                return any(self.is_keops(a) for a in node.args) or any(self.is_keops(k.value) for k in node.keywords)
            if isinstance(node.func, ast.Attribute):
                if _is_reduction(node):
                    return False                           # a reduction returns an array
                if node.func.attr in KEOPS_ONLY_METHODS:
                    return True
                if node.func.attr in KEOPS_CONSTRUCTORS and isinstance(node.func.value, (ast.Name, ast.Attribute)):
                    root = node.func.value
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if isinstance(root, ast.Name) and root.id == "pykeops":
                        return True                        # pykeops.numpy.LazyTensor(...)
                return self.is_keops(node.func.value) or any(self.is_keops(a) for a in node.args)
            return False
        if isinstance(node, ast.BinOp):
            return self.is_keops(node.left) or self.is_keops(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_keops(node.operand)
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            return self.is_keops(node.value)
        if isinstance(node, ast.IfExp):
            return self.is_keops(node.body) or self.is_keops(node.orelse)
        if isinstance(node, ast.NamedExpr):
            return self.is_keops(node.value)
        return False

    def is_factorised(self, node) -> bool:
        return _is_factorise_call(node) or (isinstance(node, ast.Name) and node.id in self.factorised)


def _is_factorise_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "auto_factorize")


def _walk_no_nested(node):
    """``ast.walk`` that does not enter function or class definitions (their own scopes; lambdas
    are entered: they read the enclosing names)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield n
        stack.extend(ast.iter_child_nodes(n))


def _nested_defs(body):
    """The function and class definitions directly inside ``body`` (not inside another definition)."""
    out, stack = [], list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(n)
            continue
        stack.extend(ast.iter_child_nodes(n))
    return out


def _scopes(tree, ctors):
    """(scope, body) for the module body and every function, nested functions inheriting names."""
    out = []

    def visit(body, outer):
        scope = _Scope(body, ctors, outer)
        out.append((scope, body))
        for d in _nested_defs(body):
            visit(d.body, () if isinstance(d, ast.ClassDef) else scope.keops)

    visit(tree.body, ())
    return out


def keops_problems(source: str, filename: str = "<source>") -> list:
    """Unfactorised KeOps reductions (and ``keopscore.auto_factorize = ...`` flags) in ``source``.

    Parameters
    ----------
    source : str
        Python source of one module.
    filename : str
        Name used in the messages.

    Returns
    -------
    list of str
        One message per problem, ``"file:line: ..."``; empty when every KeOps reduction reduces
        an expression that calls ``.auto_factorize()``.
    """
    tree = ast.parse(source, filename)
    problems = []
    for node in ast.walk(tree):                            # the global flag does not count: say so
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == "auto_factorize":
                problems.append(f"{filename}:{node.lineno}: sets the global flag `{ast.unparse(t)}`; call "
                                "`.auto_factorize()` on the expression before its reduction instead")
    ctors = _constructors(tree)
    if not ctors and "pykeops" not in source:
        return problems
    seen = set()
    for scope, body in _scopes(tree, ctors):
        for stmt in body:
            for node in _walk_no_nested(stmt):
                if not (isinstance(node, ast.Call) and _is_reduction(node)) or id(node) in seen:
                    continue
                receiver = node.func.value
                if not scope.is_keops(receiver):
                    continue
                seen.add(id(node))
                if not scope.is_factorised(receiver):
                    problems.append(f"{filename}:{node.lineno}: KeOps reduction `.{node.func.attr}(...)` of "
                                    f"`{ast.unparse(receiver)}`, which does not call `.auto_factorize()`")
    return sorted(problems, key=lambda p: int(p.split(":")[1]))


def keops_reductions(source: str) -> int:
    """The number of KeOps reductions :func:`keops_problems` examines in ``source`` (for the tests)."""
    tree = ast.parse(source)
    ctors = _constructors(tree)
    found = set()
    for scope, body in _scopes(tree, ctors):
        for stmt in body:
            for node in _walk_no_nested(stmt):
                if isinstance(node, ast.Call) and _is_reduction(node) and scope.is_keops(node.func.value):
                    found.add(id(node))
    return len(found)


def torch_problems(source: str, filename: str = "<source>") -> list:
    """What a torch training-step benchmark lacks of the peers of the module docstring.

    Checks that ``source`` calls ``torch.compile(...)``, builds ``torch.optim.Adam`` with a
    ``fused=`` keyword, declares ``PEER_VARIANTS`` holding ``"eager"`` and ``"compile"``, and an
    ``ALLOC_ENV`` dict literal with the keys of :data:`ALLOC_KEYS`.

    Returns
    -------
    list of str
        Empty when nothing is missing.
    """
    tree = ast.parse(source, filename)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    dotted = [ast.unparse(c.func) for c in calls]
    problems = []
    if not any(d.endswith("compile") and d.split(".")[0] == "torch" for d in dotted):
        problems.append(f"{filename}: no `torch.compile(...)` peer")
    adams = [c for c, d in zip(calls, dotted) if d == "torch.optim.Adam"]
    if not adams:
        problems.append(f"{filename}: no `torch.optim.Adam(...)`")
    elif not all(any(kw.arg == "fused" for kw in c.keywords) for c in adams):
        problems.append(f"{filename}: `torch.optim.Adam(...)` without `fused=`")
    consts = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and node.value is not None:
                    try:
                        consts[t.id] = ast.literal_eval(node.value)
                    except ValueError:
                        pass
    variants = consts.get("PEER_VARIANTS", ())
    if not {"eager", "compile"} <= set(variants):
        problems.append(f"{filename}: PEER_VARIANTS must name 'eager' and 'compile', got {variants!r}")
    env = consts.get("ALLOC_ENV")
    if not isinstance(env, dict) or not set(ALLOC_KEYS) <= set(env):
        problems.append(f"{filename}: ALLOC_ENV must be a dict literal with {', '.join(ALLOC_KEYS)}")
    return problems


def benchmark_files(root=None) -> list:
    """The benchmark scripts checked by the tests: ``benchmarks/*.py``."""
    here = Path(root) if root is not None else Path(__file__).resolve().parent
    return sorted(p for p in here.glob("*.py"))
