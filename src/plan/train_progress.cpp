#include "src/plan/train_progress.h"

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

std::vector<MoeLayerFigures> moe_layer_figures(const std::vector<MoeBlockLoad>& loads, int64_t microbatches) {
    std::vector<MoeLayerFigures> figures;
    for (const MoeBlockLoad& l : loads) {
        const LoadFigures f = load_figures(l.expert_tokens);
        figures.push_back({l.block, l.aux_loss_sum / static_cast<double>(microbatches), f.max_over_mean,
                           f.idle_fraction});
    }
    return figures;
}

double IterationReport::aux_loss() const {
    double sum = 0;
    for (const MoeLayerFigures& f : moe) sum += f.aux_loss;
    return sum;
}

namespace {

// " | aux 0.0123 load max/mean 1.84 (L3) idle 0.12": the line shows one layer (the most uneven), the record all.
std::string moe_part(const IterationReport& r) {
    const MoeLayerFigures* worst = &r.moe.front();
    for (const MoeLayerFigures& f : r.moe)
        if (f.load_max_over_mean > worst->load_max_over_mean) worst = &f;
    return fmt::format(" | aux {:.4f} load max/mean {:.2f} (L{}) idle {:.2f}", r.aux_loss(), worst->load_max_over_mean,
                       worst->block, worst->idle_fraction);
}

// Per MoE layer, one of its figures.
std::vector<double> per_layer(const IterationReport& r, double MoeLayerFigures::*field) {
    std::vector<double> out;
    for (const MoeLayerFigures& f : r.moe) out.push_back(f.*field);
    return out;
}

}  // namespace

bool progress_line_due(const IterationReport& r, int64_t log_interval) {
    return r.iteration % log_interval == 0 || r.iteration == r.iterations || r.val_loss >= 0;
}

std::string progress_line(const IterationReport& r) {
    std::string line = fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f}", r.iteration,
                                   r.iterations, r.loss, r.lr, r.grad_norm);
    if (!r.moe.empty()) line += moe_part(r);
    line += fmt::format(" | {:.0f} tok/s | {:.1f} ms", r.tokens_per_s, r.seconds * 1e3);
    if (!r.stage_busy.empty()) {
        line += " | busy";
        for (double b : r.stage_busy) line += fmt::format(" {:.0f}%", 100 * b);
        line += fmt::format(" | bubble {:.1f}% | act MiB", 100 * r.bubble);
        for (double a : r.act_mib) line += fmt::format(" {:.1f}", a);
    }
    if (r.val_loss >= 0) line += fmt::format(" | val_loss {:.4f}", r.val_loss);
    return line;
}

MetricsRecord metrics_record(const IterationReport& r) {
    MetricsRecord record;
    record.add("step", r.iteration);
    record.add("loss", r.loss);
    if (!r.moe.empty()) record.add("aux_loss", r.aux_loss());
    record.add("lr", r.lr);
    record.add("grad_norm", r.grad_norm);
    record.add("tokens_per_s", r.tokens_per_s);
    if (r.val_loss >= 0) record.add("val_loss", r.val_loss);
    if (r.elapsed_s >= 0) record.add("elapsed_s", r.elapsed_s);
    if (!r.sample.empty()) record.add("sample", r.sample);
    if (!r.stage_busy.empty()) {
        record.add("stage_busy", r.stage_busy);
        record.add("bubble", r.bubble);
        record.add("act_mib", r.act_mib);
    }
    if (!r.moe.empty()) {
        std::vector<double> blocks;
        for (const MoeLayerFigures& f : r.moe) blocks.push_back(static_cast<double>(f.block));
        record.add("moe_layers", blocks);
        record.add("moe_aux_loss", per_layer(r, &MoeLayerFigures::aux_loss));
        record.add("moe_load_max_over_mean", per_layer(r, &MoeLayerFigures::load_max_over_mean));
        record.add("moe_idle_fraction", per_layer(r, &MoeLayerFigures::idle_fraction));
    }
    return record;
}

void apply_nan_policy(const IterationReport& r, bool stop) {
    if (stop && !std::isfinite(r.loss)) throw RuntimeError(fmt::format("loss is {} at step {}", r.loss, r.iteration));
}

}  // namespace nb
