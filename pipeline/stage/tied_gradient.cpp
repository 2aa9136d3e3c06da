#include "pipeline/stage/tied_gradient.h"

#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "pipeline/stage/state_hash.h"

namespace nb {

namespace {

#ifdef NDEBUG
constexpr bool kCheckEachStep = false;
#else
constexpr bool kCheckEachStep = true;
#endif

constexpr size_t kHashDigits = 64;  // a sha256 in hex, one digit per double

}  // namespace

TiedGradient::TiedGradient(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops)
    : transport_(transport), ops_(ops) {
    const TrainOptions& o = setup.options;
    const int last = setup.num_stages() - 1;
    if (!o.model.tie_embeddings || last == 0 || (stage != 0 && stage != last)) return;
    peer_ = stage == 0 ? last : 0;
    copy_ = stage == last;
    stage_clip_ = o.clip_scope == ClipScope::stage && o.clip_grad > 0;
}

void TiedGradient::start(int64_t step, const Tensor& half, const Tensor& matrix) {
    transport_.post_recv(peer_, {Channel::tied_grads, step}, half.shape(), half.dtype());
    transport_.send(peer_, {Channel::tied_grads, step}, ops_.copy_of(half));  // `half` changes once the other's comes
    if (!kCheckEachStep) return;
    transport_.post_recv_values(peer_, {Channel::tied_check, step}, kHashDigits);
    matrix_hash_ = stages_sha256({{matrix}});
    transport_.send_values(peer_, {Channel::tied_check, step}, std::vector<double>(matrix_hash_.begin(),
                                                                                   matrix_hash_.end()));
}

bool TiedGradient::try_add(int64_t step, Tensor& half) {
    if (!other_half_) other_half_ = transport_.try_take(peer_, {Channel::tied_grads, step});
    if (kCheckEachStep && !peer_hash_) {
        if (std::optional<std::vector<double>> digits = transport_.try_take_values(peer_, {Channel::tied_check, step}))
            peer_hash_ = std::string(digits->begin(), digits->end());
    }
    if (!other_half_ || (kCheckEachStep && !peer_hash_)) return false;
    if (kCheckEachStep && *peer_hash_ != matrix_hash_)
        throw std::logic_error(fmt::format("step {}: the tied embedding's copies differ before the update: this "
                                           "stage's sha256 {}, stage {}'s {}", step, matrix_hash_, peer_, *peer_hash_));
    ops_.add_inplace(half, *other_half_);
    other_half_.reset();
    peer_hash_.reset();
    return true;
}

void TiedGradient::send_norm(int64_t step, double norm) {
    transport_.send_values(peer_, {Channel::tied_norm, step}, {norm});
}

std::optional<double> TiedGradient::try_take_norm(int64_t step) {
    if (!norm_posted_) transport_.post_recv_values(peer_, {Channel::tied_norm, step}, 1);
    norm_posted_ = true;
    const std::optional<std::vector<double>> got = transport_.try_take_values(peer_, {Channel::tied_norm, step});
    if (!got) return std::nullopt;
    norm_posted_ = false;
    return got->at(0);
}

std::string TiedGradient::waits_for() const {
    return fmt::format("the tied embedding's gradient half (or norm) from stage {}", peer_);
}

bool names_tied_matrix(const std::string& name) {
    constexpr std::string_view kMatrix = ".embedding.weight";
    return name.size() >= kMatrix.size() && name.compare(name.size() - kMatrix.size(), kMatrix.size(), kMatrix) == 0;
}

SafetensorsPieces stage_file_pieces(const std::vector<std::pair<std::string, const Tensor*>>& carried,
                                   const ParamLayout& layout, const OlderVersions& older, bool holds_copy) {
    if (!holds_copy) return stage_state_pieces(carried, layout, older);
    std::vector<std::pair<std::string, const Tensor*>> rest;
    for (const auto& entry : carried)
        if (!names_tied_matrix(entry.first)) rest.push_back(entry);
    return stage_state_pieces(rest, layout, older);
}

}  // namespace nb
