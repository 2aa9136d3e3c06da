#include "src/run/hf_folder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "model/hf_names.h"
#include "model/stage_model.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/core/safetensors.h"
#include "src/run/hf_tokenizer.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// f32 to bfloat16, rounded to nearest even (torch's conversion); a NaN stays a quiet NaN.
uint16_t bf16_bits_of(float value) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

Tensor in_dtype(const Tensor& f32, DType dtype) {
    if (dtype == DType::f32) return f32;
    Tensor out = Tensor::empty(f32.shape(), DType::bf16);
    auto* bits = static_cast<uint16_t*>(out.data());
    const float* in = f32.f32();
    for (int64_t i = 0, n = f32.numel(); i < n; ++i) bits[i] = bf16_bits_of(in[i]);
    return out;
}

// The model's tensors in model order under HF's names, in the export's dtype.
std::vector<std::pair<std::string, Tensor>> hf_tensors(const ModelConfig& model, const NamedWeights& weights,
                                                       DType dtype) {
    const StageModel whole(model, whole_model_spec(model));
    std::vector<std::pair<std::string, Tensor>> out;
    for (const ParamInfo& info : whole.layout().params()) {
        const auto hf = hf_name_of(info.name);
        if (!hf) throw std::invalid_argument(fmt::format("'{}' has no Hugging Face Llama name", info.name));
        const auto it = weights.find(info.name);
        if (it == weights.end() || it->second.shape() != info.shape)
            throw RuntimeError(fmt::format("the weights lack '{}' {}", info.name, shape_string(info.shape)));
        out.emplace_back(*hf, in_dtype(it->second, dtype));
    }
    return out;
}

// The tensors cut into shards as transformers' save_pretrained does: in order, a new shard where the next tensor
// would pass the size (a tensor larger than it alone in its own).
std::vector<std::vector<size_t>> shard_plan(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                            int64_t max_bytes) {
    std::vector<std::vector<size_t>> shards(1);
    int64_t bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto size = static_cast<int64_t>(tensors[i].second.bytes());
        if (!shards.back().empty() && bytes + size > max_bytes) {
            shards.emplace_back();
            bytes = 0;
        }
        shards.back().push_back(i);
        bytes += size;
    }
    return shards;
}

std::string shard_name(size_t k, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n); }

// The tensor files into `dir`; their bytes.
int64_t write_tensor_files(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t max_shard_bytes,
                           const std::string& dir) {
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    const std::vector<std::vector<size_t>> shards = shard_plan(tensors, max_shard_bytes);
    Json weight_map = Json::object();
    int64_t file_bytes = 0, tensor_bytes = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
        const std::string name = shards.size() == 1 ? kSingleFile : shard_name(k, shards.size());
        std::vector<std::pair<std::string, const Tensor*>> named;
        for (const size_t i : shards[k]) {
            named.emplace_back(tensors[i].first, &tensors[i].second);
            weight_map[tensors[i].first] = name;
            tensor_bytes += static_cast<int64_t>(tensors[i].second.bytes());
        }
        const SafetensorsPieces file(named, metadata);
        write_file_atomically(dir + "/" + name, file.pieces());
        file_bytes += static_cast<int64_t>(file.bytes());
    }
    if (shards.size() > 1) {
        const Json index = {{"metadata", {{"total_size", tensor_bytes}}}, {"weight_map", weight_map}};
        write_file_atomically(dir + "/" + kIndexFile, index.dump(2) + "\n");
    }
    return file_bytes;
}

void rename_or_throw(const std::string& from, const std::string& to) {
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) throw RuntimeError(fmt::format("cannot rename '{}' to '{}': {}", from, to, ec.message()));
}

// The tensor files a folder holds: the index's, or the single file.
std::vector<std::string> tensor_files_of(const std::string& dir) {
    const std::string index_path = dir + "/" + kIndexFile;
    if (!fs::exists(index_path)) {
        if (!fs::exists(dir + "/" + kSingleFile))
            throw RuntimeError(fmt::format("'{}': neither {} nor {} (only safetensors folders are read; a "
                                           "pytorch_model.bin is not)", dir, kSingleFile, kIndexFile));
        return {kSingleFile};
    }
    std::set<std::string> files;
    try {
        const Json index = read_json(read_whole_file(index_path), index_path);
        for (const auto& [tensor, file] : index.at("weight_map").items()) {
            const std::string name = file.get<std::string>();
            if (name.empty() || name.find('/') != std::string::npos || name.starts_with("."))
                throw RuntimeError(fmt::format("'{}': weight_map names the file '{}' for '{}': not a file of this "
                                               "folder", index_path, name, tensor));
            files.insert(name);
        }
    } catch (const Json::exception& e) {
        throw RuntimeError(fmt::format("'{}': {}", index_path, e.what()));
    }
    return {files.begin(), files.end()};
}

// A file mapped read-only (its header is parsed in place), and its descriptor (F32 tensors are read straight into
// their own storage with pread: one copy from the page cache, as a plain read makes; the mapping's data pages are
// touched only by the dtypes that are widened).
class MappedFile {
public:
    explicit MappedFile(const std::string& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) throw RuntimeError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
        struct stat st {};
        if (::fstat(fd_, &st) != 0) fail("cannot stat");
        size_ = static_cast<size_t>(st.st_size);
        if (size_ == 0) return;
        addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
        if (addr_ == MAP_FAILED) fail("cannot map");
    }
    ~MappedFile() {
        if (addr_ != MAP_FAILED) ::munmap(addr_, size_);
        ::close(fd_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::string_view bytes() const {
        return addr_ == MAP_FAILED ? std::string_view() : std::string_view(static_cast<const char*>(addr_), size_);
    }
    // `size` bytes at `offset` into `into`.
    void read_at(void* into, size_t size, size_t offset) const {
        auto* p = static_cast<char*>(into);
        while (size > 0) {
            const ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail("cannot read");
            p += n;
            size -= static_cast<size_t>(n);
            offset += static_cast<size_t>(n);
        }
    }

private:
    [[noreturn]] void fail(const char* what) const {
        throw RuntimeError(fmt::format("{} '{}': {}", what, path_, std::strerror(errno)));
    }
    std::string path_;
    int fd_ = -1;
    size_t size_ = 0;
    void* addr_ = MAP_FAILED;
};

// The tensor as f32: an F32 one read from the file into its own storage, the others widened from the mapping.
Tensor f32_tensor(const MappedFile& file, const SafetensorsView& view, const SafetensorsEntry& entry) {
    if (entry.dtype != SafetensorsDType::f32) return view.as_f32(entry);
    Tensor t = Tensor::empty(entry.shape, DType::f32);
    file.read_at(t.data(), entry.data.size(), static_cast<size_t>(entry.data.data() - file.bytes().data()));
    return t;
}

// One file's tensors into `out` under our names (a tied model's lm_head.weight, where a file has it, is the
// embedding's and is left out; a rotary inv_freq buffer is not a weight).
void read_tensor_file(const std::string& path, bool tied, NamedWeights& out) {
    const MappedFile file(path);
    const SafetensorsView view = parse_safetensors(file.bytes(), path);
    for (const SafetensorsEntry& entry : view.tensors) {
        if (entry.name.ends_with("rotary_emb.inv_freq") || (tied && entry.name == "lm_head.weight")) continue;
        const auto ours = our_name_of(entry.name);
        if (!ours)
            throw RuntimeError(fmt::format("'{}': tensor '{}' is not a parameter of a Llama model that nobubble "
                                           "computes", path, entry.name));
        if (!out.emplace(*ours, f32_tensor(file, view, entry)).second)
            throw RuntimeError(fmt::format("'{}': tensor '{}' is in two files of the folder", path, entry.name));
    }
}

// Every tensor read is a parameter of the config's model, of its shape, and every parameter is there.
void check_against_model(const ModelConfig& model, const NamedWeights& weights, const std::string& dir) {
    const StageModel whole(model, whole_model_spec(model));
    const ParamLayout& layout = whole.layout();
    for (const auto& [name, tensor] : weights)
        if (layout.index_of(name) < 0)
            throw RuntimeError(fmt::format("'{}': tensor '{}' is not in the model config.json describes", dir,
                                           *hf_name_of(name)));
    for (const ParamInfo& info : layout.params()) {
        const auto it = weights.find(info.name);
        if (it == weights.end())
            throw RuntimeError(fmt::format("'{}': no tensor '{}'", dir, *hf_name_of(info.name)));
        if (it->second.shape() != info.shape)
            throw RuntimeError(fmt::format("'{}': tensor '{}' is {}, config.json's model has {}", dir,
                                           *hf_name_of(info.name), shape_string(it->second.shape()),
                                           shape_string(info.shape)));
    }
}

}  // namespace

int64_t write_hf_folder(const HfModelConfig& config, const NamedWeights& weights, const HfWriteOptions& o) {
    fs::path out = fs::path(o.out_dir).lexically_normal();
    if (out.filename().empty()) out = out.parent_path();  // "DIR/" names DIR
    if (fs::exists(out)) throw UsageError(fmt::format("--out '{}' exists: export writes a new folder", o.out_dir));
    HfModelConfig written = config;
    written.torch_dtype = kHfExportDTypes.name(o.dtype);
    const auto tensors = hf_tensors(config.model, weights, o.dtype);
    const std::string tmp = fmt::format("{}.tmp.{}", out.string(), ::getpid());
    std::error_code ec;
    fs::create_directories(tmp, ec);
    if (ec) throw RuntimeError(fmt::format("--out '{}': cannot create '{}': {}", o.out_dir, tmp, ec.message()));
    try {
        const int64_t bytes = write_tensor_files(tensors, o.max_shard_bytes, tmp);
        write_file_atomically(tmp + "/config.json", hf_config_json(written));
        write_file_atomically(tmp + "/generation_config.json", hf_generation_config_json(written));
        if (o.tokenizer)
            for (const auto& [name, bytes] : hf_tokenizer_files(*o.tokenizer, config.max_position_embeddings))
                write_file_atomically(tmp + "/" + name, bytes);
        sync_directory(tmp);
        rename_or_throw(tmp, out.string());
        sync_directory(out.has_parent_path() ? out.parent_path().string() : ".");
        return bytes;
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
}

HfModel read_hf_folder(const std::string& dir) {
    HfModel m;
    m.config = parse_hf_config(read_whole_file(dir + "/config.json"), dir + "/config.json");
    for (const std::string& file : tensor_files_of(dir)) {
        const std::string path = dir + "/" + file;
        read_tensor_file(path, m.config.model.tie_embeddings, m.weights);
        m.file_bytes += static_cast<int64_t>(fs::file_size(path));
    }
    check_against_model(m.config.model, m.weights, dir);
    return m;
}

}  // namespace nb
