// What the C++ sides of the oracle tests (tests/oracle/dump_*.cpp) share: writing raw little-endian files for the
// Python oracles to read, the random weights and gradients of the optimizer dumps, and the main() of the dumps
// that write one directory per case.
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/params.h"
#include "src/core/tensor.h"

namespace nb::oracle {

static_assert(std::endian::native == std::endian::little, "the dump format is little-endian");

inline void write_raw(const std::string& path, const void* data, size_t bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot open " + path + " for writing: " + std::strerror(errno));
    if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes) throw std::runtime_error("short write to " + path);
    if (std::fclose(f) != 0) throw std::runtime_error("cannot close " + path);
}

inline void write_text(const std::string& path, const std::string& text) {
    write_raw(path, text.data(), text.size());
}

// f32 tensors (copied to the host first) concatenated into one file.
inline void write_tensors(const std::string& path, const std::vector<const Tensor*>& tensors) {
    std::vector<float> all;
    for (const Tensor* t : tensors) {
        if (t->dtype() != DType::f32) throw std::runtime_error(path + ": only f32 tensors can be dumped");
        const Tensor host = t->to(Device::cpu);
        all.insert(all.end(), host.f32(), host.f32() + host.numel());
    }
    write_raw(path, all.data(), all.size() * sizeof(float));
}

// Every tensor of a set, in layout order.
inline void write_set(const std::string& path, const TensorSet& set) {
    std::vector<const Tensor*> tensors;
    for (const Tensor& t : set.tensors) tensors.push_back(&t);
    write_tensors(path, tensors);
}

// A layout of these parameters, in this order.
inline ParamLayout layout_of(const std::vector<ParamInfo>& params) {
    ParamLayout layout;
    for (const ParamInfo& p : params) layout.add(p);
    return layout;
}

// Uniform(lo, hi) per element, plus `norm_gain_base` on norm gains.
inline TensorSet uniform_set(const ParamLayout& layout, std::mt19937& rng, float lo, float hi, float norm_gain_base) {
    std::uniform_real_distribution<float> uniform(lo, hi);
    TensorSet t = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) {
        const float base = layout[i].kind == ParamKind::norm_gain ? norm_gain_base : 0.0f;
        float* p = t[i].f32();
        for (int64_t j = 0; j < t[i].numel(); ++j) p[j] = base + uniform(rng);
    }
    return t;
}

// The parameter file names of a manifest entry, in dir: w.<name>.f32 for the weight, g.<name>.f32 for its gradient.
struct ParamFiles {
    std::string weight, grad;
};

// Writes every parameter's weight and gradient (host f32 tensors) to its ParamFiles in dir; those names, in layout
// order.
inline std::vector<ParamFiles> write_param_files(const std::string& dir, const ParamLayout& layout,
                                                 const TensorSet& weights, const TensorSet& grads) {
    std::vector<ParamFiles> files;
    for (int i = 0; i < layout.size(); ++i) {
        ParamFiles f{"w." + layout[i].name + ".f32", "g." + layout[i].name + ".f32"};
        write_raw(dir + "/" + f.weight, weights[i].data(), weights[i].bytes());
        write_raw(dir + "/" + f.grad, grads[i].data(), grads[i].bytes());
        files.push_back(std::move(f));
    }
    return files;
}

// `program --workdir DIR [FLAG...]`, each FLAG one of `flags` (on/off): DIR and the flags given, or nullopt after
// printing "usage: <usage>" to stderr (the caller exits 2).
struct WorkdirArgs {
    std::string workdir;
    std::vector<std::string> flags;
    bool has(const std::string& flag) const { return std::find(flags.begin(), flags.end(), flag) != flags.end(); }
};
inline std::optional<WorkdirArgs> parse_workdir_args(int argc, char** argv, const std::vector<std::string>& flags,
                                                     const char* usage) {
    WorkdirArgs a;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--workdir" && i + 1 < argc) {
            a.workdir = argv[++i];
        } else if (std::find(flags.begin(), flags.end(), arg) != flags.end()) {
            a.flags.push_back(arg);
        } else {
            a.workdir.clear();
            break;
        }
    }
    if (a.workdir.empty()) {
        std::fprintf(stderr, "usage: %s\n", usage);
        return std::nullopt;
    }
    return a;
}

// Norm gains start near 1, matrices near 0, as a model would.
inline TensorSet initial_weights(const ParamLayout& layout, std::mt19937& rng) {
    return uniform_set(layout, rng, -0.5f, 0.5f, 1.0f);
}

// Uniform(-1, 1) has variance 1/3, so scaling by target / sqrt(numel / 3) gives a norm close to `target`.
inline TensorSet random_grads(const ParamLayout& layout, std::mt19937& rng, double target_norm) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const float scale = static_cast<float>(target_norm / std::sqrt(static_cast<double>(layout.total_numel()) / 3.0));
    TensorSet g = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) {
        float* p = g[i].f32();
        for (int64_t j = 0; j < g[i].numel(); ++j) p[j] = scale * uniform(rng);
    }
    return g;
}

// `program --workdir DIR`: dump(c, DIR/<c.name>, seed) for every case, the seed counting up from first_seed, then
// DIR/cases.json listing the cases' names (what tests/oracle/case_oracle.py reads). Exit 2 for a bad command
// line, 1 when a case throws.
template <class Case, class Dump>
int dump_cases_main(const char* program, int argc, char** argv, const std::vector<Case>& cases, uint64_t first_seed,
                    Dump dump) {
    if (argc != 3 || std::string(argv[1]) != "--workdir") {
        std::fprintf(stderr, "usage: %s --workdir DIR\n", program);
        return 2;
    }
    const std::string workdir = argv[2];
    try {
        uint64_t seed = first_seed;
        std::vector<std::string> names;
        for (const Case& c : cases) {
            dump(c, workdir + "/" + c.name, seed++);
            names.push_back(fmt::format("\"{}\"", c.name));
        }
        write_text(workdir + "/cases.json", fmt::format("[{}]\n", fmt::join(names, ", ")));
        std::printf("%s: %zu cases written to %s\n", program, names.size(), workdir.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", program, e.what());
        return 1;
    }
    return 0;
}

}  // namespace nb::oracle
