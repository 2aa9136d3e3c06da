"""Oracle for SOAP: our optimizer (optim/soap.cpp via make_optimizer) against the published rule, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_soap.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

The rule is nikhilvyas/SOAP, soap.py as released with the paper (class SOAP: step, update_preconditioner,
project, project_back, get_orthogonal_matrix, get_orthogonal_matrix_QR), with merge_dims, precondition_1d and
normalize_grads False and correct_bias True, written out again below. Per parameter, sb = shampoo_beta (beta2
when < 0), project(X) = Q0^T X Q1, project_back(X) = Q0 X Q1^T (identity on a 1-D parameter's side):
  first call: GG_0 = lerp(0, G G^T, 1 - sb), GG_1 = lerp(0, G^T G, 1 - sb);
              Q_d = eigh(GG_d + 1e-30 I) eigenvectors, flipped to descending eigenvalue order; no update.
  later calls: s += 1;  Gp = project(G)
      M = b1 M + (1 - b1) Gp;  V = b2 V + (1 - b2) Gp^2;  denom = sqrt(V) + eps
      p -= lr * sqrt(1 - b2^s) / (1 - b1^s) * project_back(M / denom)
      if wd > 0: p += p * (-lr * wd)
      M = project_back(M);  GG_d = lerp(GG_d, outer_d, 1 - sb)
      if s % precondition_frequency == 0, for d = 0, 1: est = diag(Q_d^T GG_d Q_d); idx = argsort(est, desc);
          V = V.index_select(d, idx); Q_d = Q_d[:, idx]; Q_d = qr(GG_d Q_d).Q
      M = project(M)
  Defaults: lr 3e-3, betas (0.95, 0.95), shampoo_beta -1, eps 1e-8, wd 0.01, precondition_frequency 10,
  max_precond_dim 10000.

Our convention (not in the reference): no weight decay on norm gains.

The initial eigenbasis is OURS, verified first: an eigenvector basis is not unique where eigenvalues repeat (the
first GG_0 of a [7, 5] gradient is 7x7 of rank 5: any orthonormal basis of its 2-dim null space will do), so an
independent eigh need not agree with ours. dump_optimizer writes our Q_d after the first step; this oracle checks
that each is orthonormal and diagonalises its own GG_d (computed here from the gradient) with eigenvalues in
descending order equal to torch.linalg.eigvalsh's, then replays from our Q_d. After that everything is computed
here. The QR refreshes are unique up to the signs of Q's columns, which cancel in the update; so the comparison
is on quantities free of them: final weights, exp_avg_sq (V; sign-free), GG0/GG1, the first moment in the
original space (Soap::exp_avg_original_space), and the projected exp_avg and Q only after aligning each
column's sign with the reference's.

Three runs, 12 steps each (first call + 11 updates), lr peak 3e-3: "defaults" (--lr only: wd 0.01 and
precondition_frequency 10, one refresh at s = 10), "custom" (every flag set; frequency 4: refreshes at s = 4, 8)
and "tiny" (as defaults, gradients scaled by 1e-6 so that eps matters).
Tolerance 1e-5.
"""

import torch

import optim_oracle as oo

PUBLISHED = dict(betas=(0.95, 0.95), shampoo_beta=-1.0, eps=1e-8, weight_decay=0.01, precondition_frequency=10)


def contract_each_dim(x, qs, dims):
    """soap.py's loop in project() and project_back(): for each dim in turn, tensordot with its Q over `dims`
    (either way the contracted dim comes out last); where Q is [], only move that dim to the end."""
    for mat in qs:
        if len(mat) > 0:
            x = torch.tensordot(x, mat, dims=dims)
        else:
            x = x.permute(list(range(1, len(x.shape))) + [0])
    return x


def project(x, qs):
    """soap.py project(): tensordot over each dim with its Q (dims [[0], [0]]); identity where Q is []."""
    return contract_each_dim(x, qs, [[0], [0]])


def project_back(x, qs):
    """soap.py project_back(): tensordot with dims [[0], [1]]."""
    return contract_each_dim(x, qs, [[0], [1]])


def outer(grad, idx):
    """soap.py update_preconditioner's outer product for dimension idx (contract every other dimension)."""
    dims = [d for d in range(grad.dim()) if d != idx]
    return torch.tensordot(grad, grad, dims=[dims, dims])


def qr_refresh(st):
    """soap.py get_orthogonal_matrix_QR (merge_dims False)."""
    exp_avg_sq = st["exp_avg_sq"]
    final = []
    for ind, (m, o) in enumerate(zip(st["GG"], st["Q"])):
        if len(m) == 0:
            final.append([])
            continue
        est_eig = torch.diag(o.T @ m @ o)
        sort_idx = torch.argsort(est_eig, descending=True)
        exp_avg_sq = exp_avg_sq.index_select(ind, sort_idx)
        o = o[:, sort_idx]
        power_iter = m @ o
        Q, _ = torch.linalg.qr(power_iter)
        final.append(Q)
    st["exp_avg_sq"] = exp_avg_sq
    st["Q"] = final


def verify_initial_basis(checker, label, case, i, d, q, gg):
    """Our Q_d (from the dump) must be an orthonormal eigenbasis of the GG_d computed here, eigenvalues descending."""
    name = f"{case.names[i]} Q{d}"
    q64, gg64 = q.double(), gg.double()
    n = q64.shape[0]
    ref_eig = torch.linalg.eigvalsh(gg64).flip(0)  # descending
    scale = max(ref_eig.abs().max().item(), 1e-30)
    ortho = (q64.T @ q64 - torch.eye(n, dtype=torch.float64)).abs().max().item()
    checker.record(label, f"initial {name}: |Q^T Q - I|", ortho)
    diag = q64.T @ gg64 @ q64
    est = torch.diagonal(diag)
    offdiag = (diag - torch.diag(est)).abs().max().item() / scale
    checker.record(label, f"initial {name}: offdiag(Q^T GG Q) / max eig", offdiag)
    checker.record(label, f"initial {name}: diag(Q^T GG Q) vs eigvalsh", (est - ref_eig).abs().max().item() / scale)
    rises = (est[1:] - est[:-1]).clamp(min=0).max().item() / scale if n > 1 else 0.0
    checker.record(label, f"initial {name}: eigenvalues descending (rise)", rises)


def replay(checker, label, case, hp):
    b1, b2 = hp["betas"]
    sb = hp["shampoo_beta"] if hp["shampoo_beta"] >= 0 else b2
    eps, freq = hp["eps"], hp["precondition_frequency"]
    ours_q = {(e["param"], e["dim"]): oo.read_tensor(case.file(e["file"]), e["shape"])
              for e in case.m["soap_eigenbasis_after_step_1"]}
    weights = oo.clones(case.weights_init)
    states = [dict() for _ in weights]
    for k in range(case.steps):
        lr = case.lrs[k]
        for i, (p, grad) in enumerate(zip(weights, case.grads[k])):
            st = states[i]
            if "exp_avg" not in st:
                st["step"] = 0
                st["exp_avg"] = torch.zeros_like(grad)
                st["exp_avg_sq"] = torch.zeros_like(grad)
                # init_preconditioner + update_preconditioner (step 0: no projection, no QR)
                if grad.dim() == 1:  # precondition_1d False
                    st["GG"], st["Q"] = [[]], [[]]
                else:
                    st["GG"] = [torch.zeros(sh, sh).lerp_(outer(grad, idx), 1 - sb)
                                for idx, sh in enumerate(grad.shape)]
                    st["Q"] = []
                    for d, gg in enumerate(st["GG"]):
                        if (i, d) not in ours_q:
                            checker.fail(label, f"no initial eigenbasis Q{d} dumped for {case.names[i]}")
                            st["Q"].append(torch.eye(gg.shape[0]))
                            continue
                        verify_initial_basis(checker, label, case, i, d, ours_q[(i, d)], gg)
                        st["Q"].append(ours_q[(i, d)].clone())
                continue  # first step is skipped (soap.py)

            grad_projected = project(grad, st["Q"])
            exp_avg, exp_avg_sq = st["exp_avg"], st["exp_avg_sq"]
            st["step"] += 1
            exp_avg.mul_(b1).add_(grad_projected, alpha=(1.0 - b1))
            exp_avg_sq.mul_(b2).add_(grad_projected.square(), alpha=(1.0 - b2))
            denom = exp_avg_sq.sqrt().add_(eps)
            bias_correction1 = 1.0 - b1 ** st["step"]
            bias_correction2 = 1.0 - b2 ** st["step"]
            step_size = lr * (bias_correction2 ** .5) / bias_correction1
            norm_grad = project_back(exp_avg / denom, st["Q"])
            p.add_(norm_grad, alpha=-step_size)
            wd = hp["weight_decay"] if case.decays(i) else 0.0
            if wd > 0.0:
                p.add_(p, alpha=(-lr * wd))
            # update_preconditioner (Q is set)
            st["exp_avg"] = project_back(st["exp_avg"], st["Q"])
            if grad.dim() == 2:
                for idx in range(2):
                    st["GG"][idx].lerp_(outer(grad, idx), 1 - sb)
            if st["step"] > 0 and st["step"] % freq == 0:
                qr_refresh(st)
            st["exp_avg"] = project(st["exp_avg"], st["Q"])
    return weights, states


def column_signs(ours, ref):
    """+-1 per column of ref, matching ours's column to ref's."""
    s = torch.sign((ours.double() * ref.double()).sum(0))
    s[s == 0] = 1
    return s


def compare(checker, label, case, ref_weights, states):
    ref_state = {}
    for i, (name, st) in enumerate(zip(case.names, states)):
        ref_state[f"exp_avg_sq.{name}"] = st["exp_avg_sq"]
        for d, gg in enumerate(st["GG"]):
            if len(gg) > 0:
                ref_state[f"GG{d}.{name}"] = gg
    checker.compare_case(label, case, ref_weights, ref_state, unchecked={
        n: "sign-aligned comparison below" for n in case.state if n.startswith(("exp_avg.", "Q0.", "Q1."))})
    # The first moment in the original space: free of the basis' signs.
    for e in case.m["soap_exp_avg_original_space"]:
        i = e["param"]
        ours = oo.read_tensor(case.file(e["file"]), e["shape"])
        checker.check(label, f"exp_avg_original_space.{case.names[i]}", ours,
                      project_back(states[i]["exp_avg"], states[i]["Q"]))
    # Q and the projected exp_avg after aligning each column's sign (the QR's sign choice is arbitrary).
    for i, (name, st) in enumerate(zip(case.names, states)):
        m_ours = case.state.get(f"exp_avg.{name}")
        if m_ours is None:
            checker.fail(label, f"exp_avg.{name} is missing from our state")
            continue
        signs = []
        for d, q_ref in enumerate(st["Q"]):
            if len(q_ref) == 0:
                signs.append(None)
                continue
            q_ours = case.state.get(f"Q{d}.{name}")
            if q_ours is None:
                checker.fail(label, f"Q{d}.{name} is missing from our state")
                signs.append(torch.ones(q_ref.shape[1], dtype=torch.float64))
                continue
            s = column_signs(q_ours, q_ref)
            signs.append(s)
            checker.check(label, f"Q{d}.{name} (column signs aligned)", q_ours.double() * s, q_ref)
        m = m_ours.double()
        if m.dim() == 2:
            if signs[0] is not None:
                m = m * signs[0][:, None]
            if signs[1] is not None:
                m = m * signs[1][None, :]
        checker.check(label, f"exp_avg.{name} (signs aligned)", m, st["exp_avg"])


def main():
    args = oo.parse_args(__doc__)
    checker = oo.Checker()
    r = oo.lr32
    runs = [
        ("defaults", ["--lr", 3e-3], dict(PUBLISHED)),
        ("custom", ["--lr", 3e-3, "--beta1", 0.9, "--beta2", 0.99, "--shampoo-beta", 0.9, "--eps", 1e-7,
                    "--weight-decay", 0.1, "--precondition-frequency", 4],
         dict(betas=(r(0.9), r(0.99)), shampoo_beta=r(0.9), eps=r(1e-7), weight_decay=r(0.1),
              precondition_frequency=4)),
        ("tiny", ["--lr", 3e-3, "--grad-scale", 1e-6], dict(PUBLISHED)),
    ]
    for label, flags, hp in runs:
        case = oo.Case(args.dump, f"{args.workdir}/{label}", ["--optimizer", "soap", "--steps", 12] + flags)
        ref_weights, states = replay(checker, label, case, hp)
        refreshes = sum(1 for s in range(1, case.steps) if s % hp["precondition_frequency"] == 0)
        checker.note(label, f"{case.steps - 1} updates after the first call, {refreshes} eigenbasis refresh(es)")
        if refreshes == 0:
            checker.fail(label, "no eigenbasis refresh happened: use more steps")
        compare(checker, label, case, ref_weights, states)
    checker.finish()


if __name__ == "__main__":
    main()
