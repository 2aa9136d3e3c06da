// A stage's carried state through its checkpoint file (pipeline/stage/stage_checkpoint.h): for every optimizer (with
// ef's buffer), a stage restored from the file continues bit for bit as the stage that wrote it; a checkpoint
// of one cut restores a stage of another (the names are per parameter); a file of another model or optimizer is
// an error naming the tensor, and leaves the stage as it was. The file is safetensors with the stage file's
// metadata; checkpoint format 1's NBSTATE1 file still restores the same state.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/partition.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "src/core/tensor_file.h"
#include "src/run/backend.h"
#include "tests/unit/pipeline_test_util.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

// The same made-up gradients for a stage at `step`, whatever object holds them.
void fill_grads(StageState& s, int64_t step) {
    for (int i = 0; i < s.grads.size(); ++i) {
        float* g = s.grads[i].f32();
        for (int64_t k = 0; k < s.grads[i].numel(); ++k)
            g[k] = 0.1f * std::sin(0.7f * static_cast<float>(step) + 1.3f * static_cast<float>(i) +
                                   0.01f * static_cast<float>(k));
    }
}

void step(Ops& ops, StageState& s, int64_t t) {
    fill_grads(s, t);
    s.optimizer.step(ops, s.model.layout(), s.master, s.grads, 1e-2f, /*asynchronous=*/true, nullptr);
}

bool same_state(StageState& a, StageState& b) {
    const auto x = a.state_tensors(), y = b.state_tensors();
    if (x.size() != y.size() || a.optimizer.steps_taken() != b.optimizer.steps_taken()) return false;
    for (size_t i = 0; i < x.size(); ++i)
        if (x[i].first != y[i].first || x[i].second->shape() != y[i].second->shape() ||
            std::memcmp(x[i].second->data(), y[i].second->data(), x[i].second->bytes()) != 0)
            return false;
    return true;
}

TrainOptions options(const std::string& data, const std::string& optimizer) {
    TrainOptions o = test::pipeline_run(data, "2bw", 2, 2, 1, {3, 32, 48, 16});
    o.optimizer.name = optimizer;
    o.delay_fix.kind = DelayFixKind::ef;
    return o;
}

// An AdamW stage of the whole model after one step.
struct AdamwStage {
    test::TempDir dir;
    TrainOptions o = options(test::write_corpus(dir), "adamw");
    StageState stage{o, whole_model_spec(o.model), Device::cpu};
    AdamwStage() { step(*make_ops(Device::cpu), stage, 0); }
};

}  // namespace

TEST_CASE("stage checkpoint: every optimizer's stage, restored, continues bit for bit") {
    test::TempDir dir;
    const std::string data = test::write_corpus(dir);
    std::unique_ptr<Ops> ops = make_ops(Device::cpu);
    for (const char* optimizer : {"adamw", "muon", "lion", "adan", "mars", "soap"}) {
        CAPTURE(optimizer);
        const TrainOptions o = options(data, optimizer);
        const auto cut = partition_model(o.model, 2);
        std::vector<std::unique_ptr<StageState>> ran, resumed;
        std::vector<std::vector<NamedTensor>> files;
        for (const StageSpec& spec : cut) {
            ran.push_back(std::make_unique<StageState>(o, spec, Device::cpu));
            for (int64_t t = 0; t < 3; ++t) step(*ops, *ran.back(), t);
            files.push_back(decode_stage_file(encode_stage_state(*ran.back()), "stage file"));
        }
        const auto saved = tensors_by_name(files, "ckpt");
        for (size_t s = 0; s < cut.size(); ++s) {
            resumed.push_back(std::make_unique<StageState>(o, cut[s], Device::cpu));
            restore_stage_state(*resumed[s], saved, ran[s]->optimizer.steps_taken(), "ckpt");
            CHECK(same_state(*ran[s], *resumed[s]));
            for (int64_t t = 3; t < 5; ++t) {  // soap refreshes its eigenbasis at its own step count: it must carry
                step(*ops, *ran[s], t);
                step(*ops, *resumed[s], t);
            }
            CHECK(same_state(*ran[s], *resumed[s]));
        }
        // Another cut: one stage holding the whole model takes every tensor by its name.
        StageState whole(o, whole_model_spec(o.model), Device::cpu);
        restore_stage_state(whole, saved, ran[0]->optimizer.steps_taken(), "ckpt");
        for (const auto& [name, tensor] : whole.state_tensors()) {
            const Tensor* want = saved.at(name);
            CHECK(std::memcmp(tensor->data(), want->data(), want->bytes()) == 0);
        }
    }
}

TEST_CASE("stage checkpoint: another model or optimizer is an error naming the tensor, and changes nothing") {
    AdamwStage w;
    const TrainOptions& o = w.o;
    StageState& written = w.stage;
    const std::vector<std::vector<NamedTensor>> files{decode_stage_file(encode_stage_state(written), "f")};
    const auto saved = tensors_by_name(files, "step_1/stage_0.safetensors");  // points into `files`

    TrainOptions wider = o;
    wider.model.ffn_hidden_size = 64;
    StageState other(wider, whole_model_spec(wider.model), Device::cpu);
    StageState before(wider, whole_model_spec(wider.model), Device::cpu);
    CHECK(test::runtime_error([&] { restore_stage_state(other, saved, 1, "step_1/stage_0.safetensors"); })
              .find("'step_1/stage_0.safetensors': tensor 'weights.layers.0.mlp.") == 0);
    CHECK(same_state(other, before));  // nothing changed

    // Muon keeps state AdamW has no name for. (Lion's momentum is named exp_avg like AdamW's first moment: the
    // names cannot tell those two apart, so the manifest's optimizer field is what a resume checks first.)
    TrainOptions muon = o;
    muon.optimizer.name = "muon";
    StageState muon_stage(muon, whole_model_spec(muon.model), Device::cpu);
    CHECK(test::runtime_error([&] { restore_stage_state(muon_stage, saved, 1, "ckpt"); })
              .find("'ckpt': no tensor 'momentum_buffer.") == 0);
    CHECK(test::runtime_error([&] { tensors_by_name({files[0], files[0]}, "ckpt"); }).find("is in two stage files") !=
          std::string::npos);
}

TEST_CASE("stage checkpoint: a format-1 file (NBSTATE1) restores the same state; another file is refused by name") {
    AdamwStage w;
    const TrainOptions& o = w.o;
    StageState& written = w.stage;
    const std::vector<NamedTensor> current = decode_stage_file(encode_stage_state(written), "f.safetensors");
    std::vector<std::pair<std::string, const Tensor*>> refs;
    for (const NamedTensor& t : current) refs.emplace_back(t.name, &t.tensor);
    const std::string old_file = encode_named_tensors(refs);

    const std::vector<std::vector<NamedTensor>> files{decode_stage_file(old_file, "f.bin", 1)};
    StageState restored(o, whole_model_spec(o.model), Device::cpu);
    restore_stage_state(restored, tensors_by_name(files, "f.bin"), written.optimizer.steps_taken(), "f.bin");
    CHECK(same_state(written, restored));

    CHECK(test::runtime_error([&] { decode_stage_file(encode_safetensors(refs), "x.safetensors"); }) ==
          "'x.safetensors': not a stage file this nobubble reads: its __metadata__ 'format' is absent, not "
          "'nobubble-stage-state'");
    const std::string version_9 = encode_safetensors(refs, {{"format", "nobubble-stage-state"}, {"version", "9"}});
    CHECK(test::runtime_error([&] { decode_stage_file(version_9, "x.safetensors"); }) ==
          "'x.safetensors': not a stage file this nobubble reads: its __metadata__ 'version' is '9', not '1'");
    CHECK(test::runtime_error([&] { decode_stage_file(old_file, "x.safetensors"); })
              .find("'x.safetensors': not a safetensors file") == 0);
}

}  // namespace nb
