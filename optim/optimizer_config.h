// OptimizerConfig: which optimizer a stage runs (--optimizer) and its hyperparameters, as the command line gave
// them. A value left unset means the optimizer's published default (its row in optim/optimizer_registry.cpp,
// each taken from the authors' reference implementation); a flag that the chosen optimizer does not read is a
// usage error rather than silently ignored. The flags, their ranges and who reads them: optim/optimizer_registry.h.
//
// Two groups of flags:
//   the optimizer's own       --beta1 --beta2 --beta3 --eps --weight-decay --momentum --nesterov --ns-steps
//                             --gamma --precondition-frequency --shampoo-beta
//   its auxiliary AdamW        --adam-lr --adam-beta1 --adam-beta2 --adam-eps --adam-weight-decay: the AdamW that
//                             takes the parameters the optimizer leaves out (muon: embedding, head and norm
//                             gains; mars: the 1-D parameters). Its lr follows the same schedule, scaled by
//                             --adam-lr / --lr.
#pragma once

#include <optional>
#include <string>

namespace nb {

struct OptimizerConfig {
    std::string name = "adamw";  // --optimizer adamw | muon | lion | adan | mars | soap

    std::optional<float> beta1, beta2, beta3;      // --beta1 --beta2 --beta3 (adan has three)
    std::optional<float> eps;                      // --eps
    std::optional<float> weight_decay;             // --weight-decay (decoupled; never on norm gains)
    std::optional<float> momentum;                 // --momentum (muon)
    std::optional<bool> nesterov;                  // --nesterov (muon)
    std::optional<int> ns_steps;                   // --ns-steps (muon: Newton-Schulz iterations)
    std::optional<float> gamma;                    // --gamma (mars: variance-reduction scale)
    std::optional<int> precondition_frequency;     // --precondition-frequency (soap: eigenbasis refresh)
    std::optional<float> shampoo_beta;             // --shampoo-beta (soap: preconditioner EMA; default beta2)

    std::optional<float> adam_lr;                  // --adam-lr (muon, mars): peak lr of the auxiliary AdamW
    std::optional<float> adam_beta1, adam_beta2, adam_eps, adam_weight_decay;

    // nb::UsageError (one line naming the flag): an unknown --optimizer, a flag that the chosen optimizer does
    // not read (the first in optimizer_flags() order), or a value out of its flag's range (betas in [0, 1), eps
    // > 0, weight decay >= 0, ns-steps and precondition-frequency >= 1; the first in the order the optimizer's
    // row reads them). Defined in optim/optimizer_registry.cpp.
    void validate() const;
};

}  // namespace nb
