// dump_optimizer: runs one of our optimizers (make_optimizer) for a few steps on a small layout and writes what it
// computed, for the Python oracles tests/oracle/test_optim_<name>.py to replay from the authors' published rules
// (the shared reader and comparison are tests/oracle/optim_oracle.py).
//
//   dump_optimizer --workdir DIR --optimizer NAME --lr PEAK [--steps N] [--seed S] [--grad-scale X] [flags]
//   dump_optimizer --mode delay_fix --workdir DIR --lr PEAK --delay-fix none|ef|taylor|predict|ef,predict|...
//                  [--taylor-lambda L] [--predict-lambda L] [--lookahead-gamma G] [--sync-steps K] [--delay D]
//                  [--steps N] [--seed S] [hyperparameter flags]
//
// Hyperparameter flags are the command line's (--beta1 --beta2 --beta3 --eps --weight-decay --momentum
// --nesterov true|false --ns-steps --gamma --precondition-frequency --shampoo-beta --adam-lr --adam-beta1
// --adam-beta2 --adam-eps --adam-weight-decay); a flag left out stays unset, so the optimizer uses its default.
// The oracle passes exactly the flags it wants and computes with its own values, never ours.
//
// Mode "optimizer" (the default): per step k, random gradients (fixed by --seed; their norms, about 0.3 to 4, times
// --grad-scale: a tiny scale makes the eps terms matter) and a warm-up + cosine lr (optim/lr_schedule.h; peak --lr,
// floor --lr / 10, 3 warm-up steps), then optimizer.step.
// Mode "delay_fix": the quadratic f(W) = 0.5 * sum(a * (W - c)^2) per parameter (a in [0.5, 2], c in [-1, 1]),
// whose gradient a * (W - c) is computed here in float32 as a * (W - c). Steps k < --sync-steps are synchronous
// (the gradient at W_k, asynchronous = false); the others simulate 2BW: the gradient is computed at W_{k-1}
// (at W_0 for k = 0) and DelayFix::step gets asynchronous = true and those stale weights (nullptr for k = 0, whose
// gradient was computed at W_k itself). With predict, W_{k-1} is its prediction W_{k-1} - lambda u_{k-2}
// (DelayFix::predict_weights) where step k - 1 was asynchronous too and k - 1 >= 1; with lookahead its look-ahead
// point W_{k-1} - gamma d_{k-1}. --delay D > 1 (predict alone, no synchronous steps) simulates a pipedream stage
// that lags D updates: step k's gradient at W_{max(k-D, 0)}, and each version v >= 1 made as its prediction
// W_v - (lambda D) u_{v-1}.
//
// Files in DIR, raw little-endian float32:
//   weights_init.f32, grads_<k>.f32 (optimizer mode), weights_final.f32: all parameters concatenated in layout order;
//   state_<i>.f32: the i-th of Optimizer::state_tensors() (then DelayFix::state_tensors()) after the last step;
//   quad_a.f32, quad_c.f32 (delay_fix mode): the quadratic's coefficients, concatenated like the weights;
//   soap_q_<param>_<dim>.f32 (soap): our eigenbasis Q_dim of parameter `param` right after the first step;
//   soap_exp_avg_<param>.f32 (soap): the first moment in the original space after the last step.
// manifest.json names the parameters (name, shape, kind, weight_decay), the lrs, the state tensors (name, file,
// shape) and the SOAP extras.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "model/params.h"
#include "optim/delay_fix.h"
#include "optim/lr_schedule.h"
#include "optim/make_optimizer.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/optimizer_registry.h"
#include "optim/soap.h"

#include "tests/oracle/dump_files.h"

using namespace nb;
using namespace nb::oracle;

namespace {

// Target norm of each step's gradient (over all parameters), cycled: some steps large, some small, so that MARS's
// per-parameter clipping of c_t (at norm 1) triggers on some steps and not on others.
constexpr double kGradNorms[] = {0.5, 2.0, 0.7, 3.0, 0.3, 1.6, 0.6, 4.0, 0.85, 2.5, 1.2, 0.4, 1.9, 0.9, 3.5, 0.65};

ParamLayout make_layout() {
    return layout_of({{"embedding", {11, 4}, ParamKind::embedding},
                      {"layers.0.attn_norm", {9}, ParamKind::norm_gain},
                      {"layers.0.attn.wq", {7, 5}, ParamKind::hidden_matrix},
                      {"layers.0.attn.wo", {5, 7}, ParamKind::hidden_matrix},
                      {"layers.0.mlp.w1", {16, 16}, ParamKind::hidden_matrix},
                      {"final_norm", {9}, ParamKind::norm_gain},
                      {"head", {5, 7}, ParamKind::output_head}});
}


std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        out += ch;
    }
    return out + "\"";
}

std::string json_shape(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

struct Args {
    std::string mode = "optimizer";
    std::string workdir;
    double lr = 0.0;
    int steps = 12;
    unsigned seed = 20240611;
    double grad_scale = 1.0;
    OptimizerConfig opt;
    DelayFixConfig delay_fix;
    int sync_steps = 0;
    int delay = 1;  // the updates an asynchronous step lags (2bw 1)
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "dump_optimizer: %s\n"
                 "usage: dump_optimizer --workdir DIR --optimizer NAME --lr PEAK [--steps N] [--seed S] [flags]\n"
                 "       dump_optimizer --mode delay_fix --workdir DIR --lr PEAK --delay-fix KIND [--taylor-lambda L]\n"
                 "                      [--sync-steps K] [--delay D] [--steps N] [--seed S] [flags]\n",
                 why.c_str());
    std::exit(2);
}

float parse_float(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end != '\0') usage(flag + ": not a number: " + v);
    return x;
}

int parse_int(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') usage(flag + ": not an integer: " + v);
    return static_cast<int>(x);
}

// An optimizer hyperparameter (optim/optimizer_registry.h), read as its field's type.
OptimizerFlagValue parse_flag_value(const OptimizerFlag& f, const std::string& flag, const std::string& v) {
    return std::visit(
        [&](auto field) -> OptimizerFlagValue {
            using T = typename std::remove_reference_t<decltype(OptimizerConfig{}.*field)>::value_type;
            if constexpr (std::is_same_v<T, bool>) {
                if (v != "true" && v != "false") usage(flag + ": true or false");
                return v == "true";
            } else if constexpr (std::is_same_v<T, int>) {
                return parse_int(flag, v);
            } else {
                return parse_float(flag, v);
            }
        },
        f.field);
}

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) usage(flag + " needs a value");
        const std::string v = argv[++i];
        if (flag == "--mode") a.mode = v;
        else if (flag == "--workdir") a.workdir = v;
        else if (flag == "--optimizer") a.opt.name = v;
        else if (flag == "--lr") a.lr = parse_float(flag, v);
        else if (flag == "--steps") a.steps = parse_int(flag, v);
        else if (flag == "--seed") a.seed = static_cast<unsigned>(parse_int(flag, v));
        else if (flag == "--grad-scale") a.grad_scale = parse_float(flag, v);
        else if (flag == "--delay-fix") a.delay_fix = nb::parse_delay_fixes(v, a.delay_fix);
        else if (flag == "--predict-lambda") a.delay_fix.predict_lambda = parse_float(flag, v);
        else if (flag == "--lookahead-gamma") a.delay_fix.lookahead_gamma = parse_float(flag, v);
        else if (flag == "--taylor-lambda") a.delay_fix.taylor_lambda = parse_float(flag, v);
        else if (flag == "--sync-steps") a.sync_steps = parse_int(flag, v);
        else if (flag == "--delay") a.delay = parse_int(flag, v);
        else if (const OptimizerFlag* f = find_optimizer_flag(flag))
            set_flag_value(a.opt, *f, parse_flag_value(*f, flag, v));
        else usage("unknown flag " + flag);
    }
    if (a.workdir.empty()) usage("--workdir is required");
    if (!(a.lr > 0)) usage("--lr is required (> 0)");
    if (a.steps < 1) usage("--steps must be >= 1");
    if (!(a.grad_scale > 0)) usage("--grad-scale must be > 0");
    if (a.mode != "optimizer" && a.mode != "delay_fix") usage("--mode optimizer | delay_fix");
    if (a.delay < 1) usage("--delay must be >= 1");
    if (a.delay > 1 && (a.sync_steps > 0 || a.delay_fix.kind != nb::DelayFixKind::none))
        usage("--delay > 1 takes --delay-fix none or predict, without --sync-steps");
    return a;
}

std::vector<float> lr_list(double peak, int steps) {
    LrScheduleConfig cfg;
    cfg.decay_style = nb::LrDecayStyle::cosine;
    cfg.lr = peak;
    cfg.min_lr = peak / 10;
    cfg.warmup_iters = 3;
    const LrSchedule schedule(cfg, steps);
    std::vector<float> lrs;
    for (int k = 0; k < steps; ++k) lrs.push_back(static_cast<float>(schedule.lr_at(k)));
    return lrs;
}

struct Manifest {
    std::vector<std::string> fields;  // "key": value lines
    void add(const std::string& key, const std::string& json_value) {
        fields.push_back(fmt::format("  {}: {}", json_string(key), json_value));
    }
    std::string text() const { return fmt::format("{{\n{}\n}}\n", fmt::join(fields, ",\n")); }
};

std::string params_json(const ParamLayout& layout) {
    std::vector<std::string> params;
    for (const ParamInfo& p : layout.params())
        params.push_back(fmt::format(R"(    {{"name": {}, "shape": {}, "kind": "{}", "weight_decay": {}}})",
                                     json_string(p.name), json_shape(p.shape), param_kind_name(p.kind),
                                     p.weight_decay()));
    return fmt::format("[\n{}\n  ]", fmt::join(params, ",\n"));
}

std::string lrs_json(const std::vector<float>& lrs) {
    // {:.9g} prints a float32 exactly enough to read it back bit for bit.
    std::vector<std::string> text;
    for (float lr : lrs) text.push_back(fmt::format("{:.9g}", lr));
    return fmt::format("[{}]", fmt::join(text, ", "));
}

// Writes each named state tensor to state_<i>.f32; returns the manifest's list.
std::string dump_state(const std::string& workdir, const std::vector<std::pair<std::string, Tensor*>>& state) {
    std::vector<std::string> entries;
    for (size_t i = 0; i < state.size(); ++i) {
        const std::string file = fmt::format("state_{}.f32", i);
        write_tensors(workdir + "/" + file, {state[i].second});
        entries.push_back(fmt::format(R"(    {{"name": {}, "file": "{}", "shape": {}}})", json_string(state[i].first),
                                      file, json_shape(state[i].second->shape())));
    }
    return fmt::format("[\n{}\n  ]", fmt::join(entries, ",\n"));
}

void run_optimizer(const Args& args) {
    CpuOps ops;
    const ParamLayout layout = make_layout();
    std::mt19937 rng(args.seed);
    TensorSet weights = initial_weights(layout, rng);
    write_set(args.workdir + "/weights_init.f32", weights);

    std::unique_ptr<Optimizer> optimizer = make_optimizer(args.opt, layout, args.lr, Device::cpu);
    const std::vector<float> lrs = lr_list(args.lr, args.steps);
    Manifest m;
    m.add("mode", "\"optimizer\"");
    m.add("optimizer", json_string(optimizer->name()));
    m.add("steps", std::to_string(args.steps));
    m.add("peak_lr", fmt::format("{:.17g}", args.lr));
    m.add("grad_scale", fmt::format("{:.17g}", args.grad_scale));
    m.add("lrs", lrs_json(lrs));
    m.add("params", params_json(layout));
    m.add("weights_init", "\"weights_init.f32\"");

    std::vector<std::string> grad_files, soap_q;
    for (int k = 0; k < args.steps; ++k) {
        const size_t n = sizeof(kGradNorms) / sizeof(kGradNorms[0]);
        TensorSet grads = random_grads(layout, rng, args.grad_scale * kGradNorms[static_cast<size_t>(k) % n]);
        const std::string file = fmt::format("grads_{}.f32", k);
        write_set(args.workdir + "/" + file, grads);
        grad_files.push_back(json_string(file));
        optimizer->step(ops, layout, weights, grads, lrs[static_cast<size_t>(k)]);
        if (k == 0 && args.opt.name == "soap") {
            const auto* soap = dynamic_cast<const Soap*>(optimizer.get());
            if (!soap) throw std::runtime_error("make_optimizer(\"soap\") did not build an nb::Soap");
            for (int i = 0; i < layout.size(); ++i)
                for (int d = 0; d < static_cast<int>(layout[i].shape.size()); ++d) {
                    const Tensor* q = soap->eigenbasis(i, d);
                    if (!q) continue;
                    const std::string qfile = fmt::format("soap_q_{}_{}.f32", i, d);
                    write_tensors(args.workdir + "/" + qfile, {q});
                    soap_q.push_back(fmt::format(R"(    {{"param": {}, "dim": {}, "file": "{}", "shape": {}}})", i,
                                                 d, qfile, json_shape(q->shape())));
                }
        }
    }
    m.add("grads", fmt::format("[{}]", fmt::join(grad_files, ", ")));
    write_set(args.workdir + "/weights_final.f32", weights);
    m.add("weights_final", "\"weights_final.f32\"");
    m.add("state", dump_state(args.workdir, optimizer->state_tensors()));
    if (args.opt.name == "soap") {
        const auto* soap = dynamic_cast<const Soap*>(optimizer.get());
        std::vector<std::string> avg;
        for (int i = 0; i < layout.size(); ++i) {
            const Tensor t = soap->exp_avg_original_space(ops, i);
            const std::string file = fmt::format("soap_exp_avg_{}.f32", i);
            write_tensors(args.workdir + "/" + file, {&t});
            avg.push_back(fmt::format(R"(    {{"param": {}, "file": "{}", "shape": {}}})", i, file,
                                      json_shape(t.shape())));
        }
        m.add("soap_eigenbasis_after_step_1", fmt::format("[\n{}\n  ]", fmt::join(soap_q, ",\n")));
        m.add("soap_exp_avg_original_space", fmt::format("[\n{}\n  ]", fmt::join(avg, ",\n")));
    }
    write_text(args.workdir + "/manifest.json", m.text());
}

void run_delay_fix(const Args& args) {
    CpuOps ops;
    const ParamLayout layout = make_layout();
    std::mt19937 rng(args.seed);
    TensorSet master = initial_weights(layout, rng);
    const TensorSet a = uniform_set(layout, rng, 0.5f, 2.0f, 0.0f);
    const TensorSet c = uniform_set(layout, rng, -1.0f, 1.0f, 0.0f);
    write_set(args.workdir + "/weights_init.f32", master);
    write_set(args.workdir + "/quad_a.f32", a);
    write_set(args.workdir + "/quad_c.f32", c);

    std::unique_ptr<Optimizer> optimizer = make_optimizer(args.opt, layout, args.lr, Device::cpu);
    DelayFix fix(args.delay_fix, layout, Device::cpu);
    const std::vector<float> lrs = lr_list(args.lr, args.steps);

    // grad = a * (W - c), in float32, in that order (the oracle computes it the same way).
    auto gradient_at = [&](const TensorSet& w) {
        TensorSet g = TensorSet::zeros(layout);
        for (int i = 0; i < layout.size(); ++i) {
            const float *wp = w[i].f32(), *ap = a[i].f32(), *cp = c[i].f32();
            float* gp = g[i].f32();
            for (int64_t j = 0; j < g[i].numel(); ++j) gp[j] = ap[j] * (wp[j] - cp[j]);
        }
        return g;
    };
    auto copy_of = [&](const TensorSet& w) {
        TensorSet out = TensorSet::zeros(layout);
        for (int i = 0; i < layout.size(); ++i) out[i].copy_from(w[i]);
        return out;
    };

    // The versions as the steps use them: versions[v] is W_v; under predict a version that only asynchronous steps
    // use (v >= 1, step v asynchronous) is made as its prediction the moment it exists (the fix then holds
    // u_{v-1}), `delay` updates ahead.
    auto version_made = [&](int v) {
        TensorSet w = copy_of(master);
        if (args.delay_fix.predicts() && v >= 1 && v >= args.sync_steps)
            fix.predict_weights(ops, master, w, args.delay);
        return w;
    };
    std::vector<TensorSet> versions;
    versions.push_back(version_made(0));
    for (int k = 0; k < args.steps; ++k) {
        const bool asynchronous = k >= args.sync_steps;
        const TensorSet& used = versions[static_cast<size_t>(std::max(k - args.delay, 0))];
        TensorSet grads = gradient_at(asynchronous ? used : master);
        const TensorSet* stale = asynchronous && k > 0 ? &used : nullptr;
        fix.step(ops, *optimizer, layout, master, grads, lrs[static_cast<size_t>(k)], asynchronous, stale);
        versions.push_back(version_made(k + 1));
    }
    write_set(args.workdir + "/weights_final.f32", master);

    std::vector<std::pair<std::string, Tensor*>> state = optimizer->state_tensors();
    for (auto& s : fix.state_tensors()) state.push_back(s);
    Manifest m;
    m.add("mode", "\"delay_fix\"");
    m.add("optimizer", json_string(optimizer->name()));
    m.add("delay_fix", json_string(args.delay_fix.name()));
    m.add("predict_lambda", fmt::format("{:.9g}", args.delay_fix.predict_lambda));
    m.add("lookahead_gamma", fmt::format("{:.9g}", args.delay_fix.lookahead_gamma));
    m.add("taylor_lambda", fmt::format("{:.9g}", args.delay_fix.taylor_lambda));
    m.add("sync_steps", std::to_string(args.sync_steps));
    m.add("delay", std::to_string(args.delay));
    m.add("steps", std::to_string(args.steps));
    m.add("peak_lr", fmt::format("{:.17g}", args.lr));
    m.add("lrs", lrs_json(lrs));
    m.add("params", params_json(layout));
    m.add("weights_init", "\"weights_init.f32\"");
    m.add("quad_a", "\"quad_a.f32\"");
    m.add("quad_c", "\"quad_c.f32\"");
    m.add("weights_final", "\"weights_final.f32\"");
    m.add("state", dump_state(args.workdir, state));
    write_text(args.workdir + "/manifest.json", m.text());
}

}  // namespace

int main(int argc, char** argv) {
    const Args args = parse_args(argc, argv);
    try {
        if (args.mode == "delay_fix") run_delay_fix(args);
        else run_optimizer(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dump_optimizer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
