#include "src/plan/train_progress.h"

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

bool progress_line_due(const IterationReport& r, int64_t log_interval) {
    return r.iteration % log_interval == 0 || r.iteration == r.iterations || r.val_loss >= 0;
}

std::string progress_line(const IterationReport& r) {
    std::string line =
        fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | {:.1f} ms",
                    r.iteration, r.iterations, r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.seconds * 1e3);
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
    record.add("lr", r.lr);
    record.add("grad_norm", r.grad_norm);
    record.add("tokens_per_s", r.tokens_per_s);
    if (r.val_loss >= 0) record.add("val_loss", r.val_loss);
    if (!r.stage_busy.empty()) {
        record.add("stage_busy", r.stage_busy);
        record.add("bubble", r.bubble);
        record.add("act_mib", r.act_mib);
    }
    return record;
}

void apply_nan_policy(const IterationReport& r, bool stop) {
    if (stop && !std::isfinite(r.loss)) throw RuntimeError(fmt::format("loss is {} at step {}", r.loss, r.iteration));
}

}  // namespace nb
