#include "common/spec/model_graph_rules.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::model_graph_internal {
namespace {

// Dimensions and widths stay below this, so that products of two of them
// (and the kernels' int32 arguments) cannot overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || n > kMaxDim / d) return -1;
    n *= d;
  }
  return n;
}

bool IsDense(const GraphNode& n) { return n.kind != NodeKind::kSparse; }

// Checks the number of inputs; reports and returns false otherwise.
bool InputCount(const LayerRuleContext& ctx, size_t min, size_t max) {
  const size_t n = ctx.layer->inputs.size();
  if (n >= min && n <= max) return true;
  std::string want = min == max        ? absl::StrCat(min)
                     : max == SIZE_MAX ? absl::StrCat("at least ", min)
                                       : absl::StrCat(min, " to ", max);
  ctx.Fail(
      {{"inputs"}},
      absl::StrCat("a ", KindName(ctx.layer->spec), " layer takes ", want,
                   " input", min == 1 && max == 1 ? "" : "s", ", got ", n));
  return false;
}

// Every input is a dense node of rank `rank` (0: any rank); reports each
// that is not.
bool DenseInputs(const LayerRuleContext& ctx, int rank) {
  bool ok = true;
  for (size_t k = 0; k < ctx.layer->inputs.size(); ++k) {
    const GraphNode& in = ctx.input(k);
    if (!IsDense(in)) {
      ctx.Fail({{"inputs", static_cast<int>(k)}},
               absl::StrCat("input '", in.name,
                            "' is a sparse field; only embedding_bag layers "
                            "read sparse fields"));
      ok = false;
    } else if (rank > 0 && static_cast<int>(in.shape.size()) != rank) {
      ctx.Fail(
          {{"inputs", static_cast<int>(k)}},
          absl::StrCat("a ", KindName(ctx.layer->spec), " layer takes ",
                       rank == 1   ? "vectors [features]"
                       : rank == 3 ? "images [height, width, channels]"
                                   : absl::StrCat("rank-", rank, " values"),
                       ", but input '", in.name, "' has shape ",
                       ShapeText(in.shape),
                       rank == 1 ? " (flatten it first)" : ""));
      ok = false;
    }
  }
  return ok;
}

std::vector<int64_t> DenseOutput(const LayerRuleContext& ctx) {
  const DenseLayerSpec& d = ctx.layer->spec.dense();
  bool ok = InputCount(ctx, 1, 1) && DenseInputs(ctx, 1);
  if (d.units() <= 0 || d.units() >= kMaxDim) {
    ctx.Fail({{"dense"}, {"units"}},
             absl::StrCat("units must be in [1, 2^31), got ", d.units()));
    ok = false;
  }
  if (!ok) return {};
  return {d.units()};
}

// out = (in + 2 pad - window) / stride + 1, or -1 if no window fits.
int64_t WindowOutput(int64_t in, int64_t window, int64_t stride, int64_t pad) {
  if (in + 2 * pad < window) return -1;
  return (in + 2 * pad - window) / stride + 1;
}

std::vector<int64_t> Conv2DOutput(const LayerRuleContext& ctx) {
  const Conv2DLayerSpec& c = ctx.layer->spec.conv2d();
  bool ok = InputCount(ctx, 1, 1) && DenseInputs(ctx, 3);
  auto positive = [&](const char* field, int64_t v, bool zero_ok) {
    if (v < (zero_ok ? 0 : 1) || v >= (int64_t{1} << 16)) {
      ctx.Fail({{"conv2d"}, {field}},
               absl::StrCat(field, " must be in [", zero_ok ? 0 : 1,
                            ", 65536), got ", v));
      ok = false;
    }
  };
  if (c.filters() <= 0 || c.filters() >= kMaxDim) {
    ctx.Fail({{"conv2d"}, {"filters"}},
             absl::StrCat("filters must be in [1, 2^31), got ", c.filters()));
    ok = false;
  }
  positive("kernel_size", c.kernel_size(), false);
  positive("stride", c.stride(), true);
  positive("padding", c.padding(), true);
  if (!ok) return {};
  const std::vector<int64_t>& in = ctx.input(0).shape;
  const int64_t stride = c.stride() == 0 ? 1 : c.stride();
  const int64_t oh = WindowOutput(in[0], c.kernel_size(), stride, c.padding());
  const int64_t ow = WindowOutput(in[1], c.kernel_size(), stride, c.padding());
  if (oh <= 0 || ow <= 0) {
    ctx.Fail({{"conv2d"}, {"kernel_size"}},
             absl::StrCat("a ", c.kernel_size(), "x", c.kernel_size(),
                          " kernel with padding ", c.padding(),
                          " does not fit input '", ctx.input(0).name,
                          "' of shape ", ShapeText(in)));
    return {};
  }
  return {oh, ow, c.filters()};
}

std::vector<int64_t> PoolOutput(const LayerRuleContext& ctx,
                                const Pool2DLayerSpec& p, const char* kind) {
  bool ok = InputCount(ctx, 1, 1) && DenseInputs(ctx, 3);
  const int64_t window = p.window() == 0 ? 2 : p.window();
  const int64_t stride = p.stride() == 0 ? window : p.stride();
  if (window < 1 || window >= (int64_t{1} << 16)) {
    ctx.Fail({{kind}, {"window"}},
             absl::StrCat("window must be in [1, 65536), got ", p.window()));
    ok = false;
  }
  if (stride < 1 || stride >= (int64_t{1} << 16)) {
    ctx.Fail({{kind}, {"stride"}},
             absl::StrCat("stride must be in [1, 65536), got ", p.stride()));
    ok = false;
  }
  if (p.padding() < 0 || p.padding() > window / 2) {
    ctx.Fail({{kind}, {"padding"}},
             absl::StrCat("padding must be in [0, window / 2 = ", window / 2,
                          "], got ", p.padding()));
    ok = false;
  }
  if (!ok) return {};
  const std::vector<int64_t>& in = ctx.input(0).shape;
  const int64_t oh = WindowOutput(in[0], window, stride, p.padding());
  const int64_t ow = WindowOutput(in[1], window, stride, p.padding());
  if (oh <= 0 || ow <= 0) {
    ctx.Fail({{kind}, {"window"}},
             absl::StrCat("a ", window, "x", window,
                          " window does not fit "
                          "input '",
                          ctx.input(0).name, "' of shape ", ShapeText(in)));
    return {};
  }
  return {oh, ow, in[2]};
}

std::vector<int64_t> EmbeddingBagOutput(const LayerRuleContext& ctx,
                                        int* table) {
  const EmbeddingBagLayerSpec& e = ctx.layer->spec.embedding_bag();
  bool ok = InputCount(ctx, 1, SIZE_MAX);
  for (size_t k = 0; k < ctx.layer->inputs.size(); ++k) {
    if (IsDense(ctx.input(k))) {
      ctx.Fail({{"inputs", static_cast<int>(k)}},
               absl::StrCat("an embedding_bag layer reads sparse fields, but "
                            "input '",
                            ctx.input(k).name, "' is ",
                            ctx.input(k).kind == NodeKind::kLayer
                                ? "a layer"
                                : "the batch's dense features"));
      ok = false;
    }
  }
  *table = -1;
  for (size_t t = 0; t < ctx.tables->size(); ++t) {
    if ((*ctx.tables)[t].name == e.table()) *table = static_cast<int>(t);
  }
  if (*table < 0) {
    std::vector<std::string> names;
    for (const SparseTableRef& t : *ctx.tables) names.push_back(t.name);
    ctx.Fail(
        {{"embedding_bag"}, {"table"}},
        absl::StrCat(
            "no sparse table '", e.table(), "' in model.sparse_tables (",
            names.empty() ? "the model has none"
                          : absl::StrCat("it has ", absl::StrJoin(names, ", ")),
            ")"));
    return {};
  }
  const int64_t dim = (*ctx.tables)[*table].dim;
  if (dim <= 0 || dim >= kMaxDim) {
    ctx.Fail({{"embedding_bag"}, {"table"}},
             absl::StrCat("table '", e.table(), "' has dim ", dim));
    return {};
  }
  if (!ok) return {};
  return {dim * static_cast<int64_t>(ctx.layer->inputs.size())};
}

std::vector<int64_t> ConcatOutput(const LayerRuleContext& ctx) {
  if (!InputCount(ctx, 1, SIZE_MAX) || !DenseInputs(ctx, 1)) return {};
  int64_t sum = 0;
  for (size_t k = 0; k < ctx.layer->inputs.size(); ++k) {
    sum += ctx.input(k).shape[0];
  }
  if (sum >= kMaxDim) {
    ctx.Fail({{"inputs"}},
             absl::StrCat("the concatenation is too wide (", sum, " values)"));
    return {};
  }
  return {sum};
}

// DLRM dot and FM interactions: the number of vectors of the first input's
// width, or 0 after reporting.
int64_t InteractionFields(const LayerRuleContext& ctx) {
  if (!InputCount(ctx, 1, SIZE_MAX) || !DenseInputs(ctx, 1)) return 0;
  const int64_t dim = ctx.input(0).shape[0];
  int64_t fields = 0;
  bool ok = true;
  for (size_t k = 0; k < ctx.layer->inputs.size(); ++k) {
    const int64_t w = ctx.input(k).shape[0];
    if (w % dim != 0) {
      ctx.Fail({{"inputs", static_cast<int>(k)}},
               absl::StrCat("input '", ctx.input(k).name, "' of shape [", w,
                            "] is not a whole number of vectors of dim ", dim,
                            " (the first input's width)"));
      ok = false;
    }
    fields += w / dim;
  }
  if (!ok) return 0;
  if (fields < 2 || fields > 4096) {
    ctx.Fail({{"inputs"}},
             absl::StrCat("an interaction needs 2 to 4096 vectors of dim ", dim,
                          ", got ", fields));
    return 0;
  }
  return fields;
}

std::vector<int64_t> DotOutput(const LayerRuleContext& ctx) {
  if (!InputCount(ctx, 2, SIZE_MAX) || !DenseInputs(ctx, 1)) return {};
  const std::vector<int64_t>& u = ctx.input(0).shape;
  const std::vector<int64_t>& v = ctx.input(1).shape;
  bool ok = true;
  if (u != v) {
    ctx.Fail(
        {{"inputs", 1}},
        absl::StrCat("a dot layer takes two vectors of one dim, but '",
                     ctx.input(0).name, "' has shape ", ShapeText(u), " and '",
                     ctx.input(1).name, "' has shape ", ShapeText(v)));
    ok = false;
  }
  for (size_t k = 2; k < ctx.layer->inputs.size(); ++k) {
    if (ctx.input(k).shape != std::vector<int64_t>{1}) {
      ctx.Fail({{"inputs", static_cast<int>(k)}},
               absl::StrCat("a dot layer adds inputs of shape [1] (biases) "
                            "after its two vectors, but '",
                            ctx.input(k).name, "' has shape ",
                            ShapeText(ctx.input(k).shape)));
      ok = false;
    }
  }
  if (!ok) return {};
  return {1};
}

std::vector<int64_t> AddOutput(const LayerRuleContext& ctx) {
  if (!InputCount(ctx, 2, SIZE_MAX) || !DenseInputs(ctx, 0)) return {};
  for (size_t k = 1; k < ctx.layer->inputs.size(); ++k) {
    if (ctx.input(k).shape != ctx.input(0).shape) {
      ctx.Fail({{"inputs", static_cast<int>(k)}},
               absl::StrCat("an add layer takes inputs of one shape, but '",
                            ctx.input(0).name, "' has shape ",
                            ShapeText(ctx.input(0).shape), " and '",
                            ctx.input(k).name, "' has shape ",
                            ShapeText(ctx.input(k).shape)));
      return {};
    }
  }
  return ctx.input(0).shape;
}

InitializerSpec WeightInit(const InitializerSpec& given, Activation act) {
  InitializerSpec init = given;
  if (init.kind() == InitializerSpec::KIND_UNSPECIFIED) {
    init.set_kind(act == TANH || act == SIGMOID
                      ? InitializerSpec::XAVIER_UNIFORM
                      : InitializerSpec::HE_UNIFORM);
  }
  return init;
}

TensorSpec Tensor(const std::string& layer, const char* what,
                  std::vector<int64_t> shape, InitializerSpec init) {
  TensorSpec t;
  t.set_name(absl::StrCat(layer, "/", what));
  for (int64_t d : shape) t.add_shape(d);
  *t.mutable_init() = std::move(init);
  return t;
}

InitializerSpec Zeros() {
  InitializerSpec z;
  z.set_kind(InitializerSpec::ZEROS);
  return z;
}

}  // namespace

void LayerRuleContext::Fail(std::vector<FieldStep> sub,
                            const std::string& message) const {
  ModelIssue issue;
  issue.path.push_back({"layers", index});
  for (FieldStep& s : sub) issue.path.push_back(std::move(s));
  issue.message = absl::StrCat("layer '", layer->spec.name(), "': ", message);
  issues->push_back(std::move(issue));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string KindName(const LayerSpec& layer) {
  if (layer.kind_case() == LayerSpec::KIND_NOT_SET) return "";
  return LayerSpec::descriptor()->FindFieldByNumber(layer.kind_case())->name();
}

std::vector<int64_t> InferOutputShape(const LayerRuleContext& ctx, int* table) {
  *table = -1;
  const LayerSpec& spec = ctx.layer->spec;
  std::vector<int64_t> out;
  switch (spec.kind_case()) {
    case LayerSpec::kDense:
      out = DenseOutput(ctx);
      break;
    case LayerSpec::kActivation:
      if (InputCount(ctx, 1, 1) && DenseInputs(ctx, 0)) {
        out = ctx.input(0).shape;
      }
      break;
    case LayerSpec::kConv2D:
      out = Conv2DOutput(ctx);
      break;
    case LayerSpec::kMaxPool2D:
      out = PoolOutput(ctx, spec.max_pool2d(), "max_pool2d");
      break;
    case LayerSpec::kAvgPool2D:
      out = PoolOutput(ctx, spec.avg_pool2d(), "avg_pool2d");
      break;
    case LayerSpec::kFlatten:
      if (InputCount(ctx, 1, 1) && DenseInputs(ctx, 0)) {
        out = {ctx.input(0).width()};
      }
      break;
    case LayerSpec::kEmbeddingBag:
      out = EmbeddingBagOutput(ctx, table);
      break;
    case LayerSpec::kConcat:
      out = ConcatOutput(ctx);
      break;
    case LayerSpec::kDotInteraction:
      if (const int64_t f = InteractionFields(ctx); f > 0) {
        out = {f * (f - 1) / 2};
      }
      break;
    case LayerSpec::kFmInteraction:
      if (InteractionFields(ctx) > 0) out = {1};
      break;
    case LayerSpec::kDot:
      out = DotOutput(ctx);
      break;
    case LayerSpec::kAdd:
      out = AddOutput(ctx);
      break;
    case LayerSpec::KIND_NOT_SET:
      ctx.Fail({}, "no layer kind set (dense, conv2d, max_pool2d, ...)");
      break;
  }
  if (!out.empty() && Product(out) < 0) {
    ctx.Fail({}, absl::StrCat("its output ", ShapeText(out), " is too large"));
    return {};
  }
  return out;
}

std::vector<TensorSpec> LayerTensors(const LayerRuleContext& ctx) {
  const LayerSpec& spec = ctx.layer->spec;
  const std::string& name = spec.name();
  std::vector<TensorSpec> t;
  switch (spec.kind_case()) {
    case LayerSpec::kDense: {
      const DenseLayerSpec& d = spec.dense();
      t.push_back(Tensor(name, "weight", {ctx.input(0).shape[0], d.units()},
                         WeightInit(d.weight_init(), d.activation())));
      t.push_back(Tensor(name, "bias", {d.units()}, Zeros()));
      break;
    }
    case LayerSpec::kConv2D: {
      const Conv2DLayerSpec& c = spec.conv2d();
      const int64_t patch =
          int64_t{c.kernel_size()} * c.kernel_size() * ctx.input(0).shape[2];
      t.push_back(Tensor(name, "weight", {patch, c.filters()},
                         WeightInit(c.weight_init(), c.activation())));
      t.push_back(Tensor(name, "bias", {c.filters()}, Zeros()));
      break;
    }
    case LayerSpec::kDot:
      if (!spec.dot().no_bias()) {
        t.push_back(Tensor(name, "bias", {1}, Zeros()));
      }
      break;
    default:
      break;
  }
  return t;
}

}  // namespace ps::model_graph_internal
