// Lowering: kernels per node, the memory plan, persistent parameter storage
// and the fixed argument lists of every call.
#include "runner/graph/program.h"

#include <stdexcept>
#include <typeinfo>

#include "ops/out_of_memory.h"
#include "runner/graph/init.h"
#include "runner/graph/precision.h"

namespace trainer::graph {
namespace {

constexpr std::size_t align64(std::size_t n) {
  return (n + 63) / 64 * 64;
}

// "<file:line:col>: layer 'conv1' (conv2d)": which layer, and where the YAML
// writes it, for an error a kernel of it raised.
std::string layer_of(const Node& node) {
  return config::to_string(node.mark) + ": layer '" + node.name + "' (" + node.op->name + ")";
}

}  // namespace

CompiledKernels compile_kernels(const TrainingGraph& tg, Backend& backend,
                                const CompileOptions& options) {
  const Graph& g = tg.graph;
  const std::vector<bool> copies = bf16_weight_copies(g);
  CompiledKernels out;
  out.kernels.resize(g.nodes.size());
  out.saved_bytes.resize(g.nodes.size());
  out.workspace_bytes.assign(g.nodes.size(), 0);
  for (const Step& step : tg.schedule) {
    const Node& node = g.nodes[step.node];
    if (out.kernels[step.node]) continue;
    KernelContext ctx;
    ctx.op = node.op;
    ctx.attrs = &node.attrs;
    for (ValueId in : node.inputs) {
      ctx.inputs.push_back(g.values[in].shape);
      ctx.input_formats.push_back(g.values[in].format());
    }
    ctx.output_format = g.values[node.output].format();
    for (int p : node.params) ctx.param_decls.push_back({nullptr, g.params[p].shape, DType::f32});
    if (reads_bf16_weight_copy(node, copies))
      ctx.param_decls[0].dtype = DType::bf16;  // the weights arrive as their bf16 copy
    ctx.output = g.values[node.output].shape;
    ctx.training = true;
    ctx.deterministic = options.deterministic;
    ctx.autotune = options.autotune;
    ctx.allow_tf32 = options.allow_tf32;
    ctx.compute = node.compute;
    ctx.collective = options.collective;
    ctx.short_batches = options.short_batches;
    try {
      out.kernels[step.node] = backend.make_kernel(ctx);
    } catch (const OutOfMemoryError&) {
      throw;  // answered with the memory plan by the run command
    } catch (const std::runtime_error& e) {
      // A kernel that refuses its layer (a shape, an algorithm, a mode its
      // backend lacks): say which layer, and where the YAML writes it.
      throw std::runtime_error(layer_of(node) + ": " + e.what());
    }
    out.saved_bytes[step.node] = out.kernels[step.node]->saved_bytes();
    out.workspace_bytes[step.node] = out.kernels[step.node]->workspace_bytes();
  }
  return out;
}

Program::Program(TrainingGraph tg, Backend& backend, const CompileOptions& options)
    : tg_(std::move(tg)), backend_(backend), options_(options) {
  const Graph& g = tg_.graph;
  // 1. A kernel for every scheduled node (kernels read the graph's attributes).
  CompiledKernels compiled = compile_kernels(tg_, backend_, options_);
  kernels_ = std::move(compiled.kernels);
  const auto& saved = compiled.saved_bytes;
  const auto& workspace = compiled.workspace_bytes;

  // 2. Plan and allocate the arena.
  plan_ = plan_memory(tg_, saved, workspace);
  arena_ = DeviceBuffer(backend_, plan_.arena_bytes);
  workspace_ = DeviceBuffer(backend_, plan_.workspace_bytes);

  // 3. Persistent storage: values, then gradients, then optimizer state.
  std::size_t offset = 0;
  const std::vector<bool> copies = bf16_weight_copies(g);
  std::vector<std::size_t> value_at(g.params.size()), grad_at(g.params.size(), SIZE_MAX),
      micro_at(g.params.size(), SIZE_MAX), state_at(g.params.size(), SIZE_MAX),
      copy_at(g.params.size(), SIZE_MAX);
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    value_at[p] = offset;
    offset += align64(numel(g.params[p].shape) * sizeof(float));
  }
  const std::size_t values_bytes = offset;
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    if (!copies[p]) continue;
    copy_at[p] = offset;
    offset += align64(numel(g.params[p].shape) * 2);
  }
  params_bytes_ = offset;
  // The gradients, then (accumulating) the micro-batch gradients laid out
  // alike: one span each, cleared or added by one call (zero_gradients,
  // train_step) rather than one per parameter.
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    if (!tg_.param_needs_grad[p]) continue;
    grad_at[p] = offset;
    offset += align64(numel(g.params[p].shape) * sizeof(float));
  }
  const std::size_t grads_span_bytes = offset - params_bytes_;
  for (std::size_t p = 0; p < g.params.size() && options_.accumulate_gradients; ++p)
    if (grad_at[p] != SIZE_MAX) micro_at[p] = grad_at[p] + grads_span_bytes;
  if (options_.accumulate_gradients) offset += grads_span_bytes;
  grads_bytes_ = offset - params_bytes_;
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    if (!tg_.param_needs_grad[p] || options_.optimizer_state_tensors == 0) continue;
    state_at[p] = offset;
    offset += align64(numel(g.params[p].shape) * sizeof(float)) *
              static_cast<std::size_t>(options_.optimizer_state_tensors);
  }
  // The averaged weights laid out as the weights: one span each.
  std::vector<std::size_t> ema_at(g.params.size(), SIZE_MAX);
  const std::size_t ema_begin = offset;
  for (std::size_t p = 0; p < g.params.size() && options_.ema; ++p)
    ema_at[p] = ema_begin + value_at[p];
  if (options_.ema) offset += values_bytes;
  optimizer_bytes_ = offset - params_bytes_ - grads_bytes_;
  persistent_ = DeviceBuffer(backend_, offset);
  // Padding between parameters stays zero in every span (the fill below, and
  // element-wise ops keep 0 as 0), so whole spans can be cleared, added,
  // averaged and swapped.
  auto span = [&](std::size_t begin, std::size_t bytes) {
    return bytes == 0 ? TensorRef{}
                      : TensorRef{persistent_.at(begin),
                                  {static_cast<std::int64_t>(bytes / sizeof(float))},
                                  DType::f32};
  };
  values_span_ = span(0, values_bytes);
  grads_span_ = span(params_bytes_, grads_span_bytes);
  if (options_.accumulate_gradients)
    grads_micro_span_ = span(params_bytes_ + grads_span_bytes, grads_span_bytes);
  if (options_.ema) ema_span_ = span(ema_begin, values_bytes);
  params_.resize(g.params.size());
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    const Shape& shape = g.params[p].shape;
    auto ref = [&](std::size_t at) {
      return at == SIZE_MAX ? TensorRef{} : TensorRef{persistent_.at(at), shape, DType::f32};
    };
    ParamStorage& s = params_[p];
    s.param = &g.params[p];
    s.value = ref(value_at[p]);
    s.grad = ref(grad_at[p]);
    s.grad_micro = ref(micro_at[p]);
    s.state0 = ref(state_at[p]);
    if (state_at[p] != SIZE_MAX && options_.optimizer_state_tensors > 1)
      s.state1 = ref(state_at[p] + align64(numel(shape) * sizeof(float)));
    if (copy_at[p] != SIZE_MAX) s.bf16_copy = {persistent_.at(copy_at[p]), shape, DType::bf16};
    s.ema = ref(ema_at[p]);
  }
  if (offset)
    backend_.vector_ops().fill(
        {persistent_.data(), {static_cast<std::int64_t>(offset / 4)}, DType::f32}, 0.0f);

  // 4. Fixed arguments of every call.
  step_values_ = DeviceBuffer(backend_, sizeof(StepValues));
  set_step_values(StepValues{});
  const auto* step_values = static_cast<const StepValues*>(step_values_.data());
  input_ = value_ref(g.input);
  labels_ = value_ref(g.labels);
  loss_ = value_ref(g.loss);
  logits_ = value_ref(g.logits);
  loss_seed_ = value_ref(tg_.loss_seed);
  for (std::size_t s = 0; s < tg_.schedule.size(); ++s) {
    const Step& step = tg_.schedule[s];
    const Node& node = g.nodes[step.node];
    Call call;
    call.node = step.node;
    call.backward = step.kind == Step::Kind::backward;
    call.kernel = kernels_[step.node].get();
    KernelArgs& a = call.args;
    for (ValueId in : step.inputs) a.inputs.push_back(value_ref(in));
    for (int p : node.params) a.params.push_back(params_[p].value);
    if (reads_bf16_weight_copy(node, copies)) a.params[0] = params_[node.params[0]].bf16_copy;
    a.output = value_ref(step.output);
    // A backward call reads the saved buffers of the forward call it pairs with.
    for (int b : plan_.saved_buffers[call.backward ? step.saved_from : static_cast<int>(s)])
      a.saved.push_back(arena_.at(plan_.buffers[b].offset));
    a.workspace = workspace_.data();
    a.update_state = !step.recompute;  // a recompute must not move running statistics twice
    a.step = step_values;
    if (node.op->stochastic) a.seed_salt = splitmix64(hash_name(node.name));
    if (call.backward) {
      a.grad_output = value_ref(step.grad_output);
      for (ValueId gv : step.grad_inputs)
        a.grad_inputs.push_back(gv == kNoValue ? TensorRef{} : value_ref(gv));
      for (int p : node.params)
        a.grad_params.push_back(options_.accumulate_gradients ? params_[p].grad_micro
                                                              : params_[p].grad);
    }
    train_calls_.push_back(call);
    if (static_cast<int>(s) < tg_.forward_steps) {
      call.args.training = false;
      eval_calls_.push_back(std::move(call));
    }
  }
}

TensorRef Program::value_ref(ValueId v) const {
  if (v == kNoValue) return {};
  const Value& value = tg_.graph.values[v];
  const int b = plan_.value_buffer[v];
  if (b < 0) return {};
  return {arena_.at(plan_.buffers[b].offset), value.shape, value.dtype};
}

void Program::set_step_values(const StepValues& values) {
  backend_.copy_to_device(step_values_.data(), &values, sizeof values);
}

void Program::set_after_backward(std::function<void(const Call&)> hook) {
  after_backward_ = std::move(hook);
  if (after_backward_) {
    train_recording_.work.reset();
    train_recording_.why_not = "gradients are reduced across ranks while backward runs";
  }
}

void Program::set_update(std::function<void()> update) {
  update_ = std::move(update);
  train_recording_.work.reset();  // recorded without it, or with the old one
  train_recording_.direct_runs = 0;
}

// The first run is direct: libraries load their code and set themselves up on
// first use, which a recording must not capture. The second is recorded and
// replayed, and so is every later one; when recording is off or fails, the
// calls run directly from then on.
void Program::run(Recording& recording, const std::function<void()>& queue_calls) {
  if (recording.work) {
    recording.work->replay();
    return;
  }
  if (!options_.record_steps && recording.why_not.empty())
    recording.why_not = "recording is off (backend.cuda_graphs: false)";
  if (!recording.why_not.empty() || recording.direct_runs++ == 0) {
    queue_calls();
    return;
  }
  recording.work = backend_.record(queue_calls, recording.why_not);
  if (recording.work)
    recording.work->replay();
  else
    queue_calls();
}

std::string Program::step_execution() const {
  if (!last_step_execution_.empty()) return last_step_execution_;
  return recording_state();
}

std::string Program::recording_state() const {
  if (train_recording_.work) return "recorded";
  if (!train_recording_.why_not.empty()) return "eager: " + train_recording_.why_not;
  return "eager: no more than one step ran (the first runs directly)";
}

std::vector<ParamSlot> Program::optimizer_slots() {
  std::vector<ParamSlot> slots;
  for (const ParamStorage& p : params_) {
    if (!p.grad) continue;
    slots.push_back({p.value.f32(), p.grad.f32(), p.state0.f32(), p.state1.f32(), p.value.numel(),
                     p.param->weight_decay, static_cast<std::uint16_t*>(p.bf16_copy.data),
                     static_cast<float>(p.param->lr_scale)});
  }
  return slots;
}

void Program::reset_ema() {
  if (!ema_span_) return;
  VectorOps& ops = backend_.vector_ops();
  ops.fill(ema_span_, 0.0f);
  ops.accumulate(ema_span_, values_span_);  // 0 + w: the weights exactly
}

void Program::update_ema() {
  if (ema_span_) backend_.vector_ops().average(ema_span_, values_span_);
}

void Program::swap_ema() {
  if (!ema_span_) return;
  backend_.vector_ops().swap(values_span_, ema_span_);
  bf16_copies_stale_ = true;
}

void Program::refresh_bf16_copies() {
  for (const ParamStorage& p : params_)
    if (p.bf16_copy) backend_.vector_ops().round_to_bf16(p.value, p.bf16_copy);
  bf16_copies_stale_ = false;
}

void Program::train_step(const StepValues& values) {
  if (bf16_copies_stale_) refresh_bf16_copies();
  set_step_values(values);
  run(train_recording_, [this] {
    for (Call& c : train_calls_) {
      run_call(c);
      if (c.backward && after_backward_) after_backward_(c);
    }
    if (grads_micro_span_) backend_.vector_ops().accumulate(grads_span_, grads_micro_span_);
    if (update_) update_();
  });
  // Kept apart from the recording: a new update (or none, when a training
  // loop ends) starts the recording over, and must not change what the steps
  // that ran did.
  last_step_execution_ = recording_state();
}

void Program::eval_step(std::int64_t valid_rows) {
  if (bf16_copies_stale_) refresh_bf16_copies();
  set_step_values(StepValues{0, valid_rows});
  run(eval_recording_, [this] {
    for (Call& c : eval_calls_) run_call(c);
  });
}

void Program::run_call(Call& c) {
  try {
    if (c.backward)
      c.kernel->backward(c.args);
    else
      c.kernel->forward(c.args);
  } catch (const std::runtime_error& e) {
    // A status a library call returned mid-step (a plain runtime_error) names
    // its layer, as a refusal at compile time does; typed errors (out of
    // memory, a collective's timeout) go on as they are.
    if (typeid(e) != typeid(std::runtime_error)) throw;
    throw std::runtime_error(layer_of(tg_.graph.nodes[c.node]) + ", " +
                             (c.backward ? "backward" : "forward") + ": " + e.what());
  }
}

void Program::zero_gradients() {
  if (grads_span_) backend_.vector_ops().fill(grads_span_, 0.0f);
}

void Program::train_step_timed(std::uint64_t step_seed,
                               const std::function<void(const Call&, double ms)>& on_call) {
  if (bf16_copies_stale_) refresh_bf16_copies();
  set_step_values(StepValues{step_seed, -1});
  for (Call& c : train_calls_) on_call(c, backend_.time_work_ms([&] { run_call(c); }));
}

std::string Program::implementation_of(int node) const {
  return kernels_[node] ? kernels_[node]->implementation() : "";
}

}  // namespace trainer::graph
