// h3rt._h3rt: the Python binding of h3rt/pipeline.h. Thin: argument checks with errors naming
// the argument, latent <-> row conversions, and the GIL released around model work.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>

#include "arrays.h"
#include "conditioning.h"
#include "device_arrays.h"
#include "h3rt/build_info.h"
#include "h3rt/device.h"
#include "h3rt/pipeline.h"
#include "h3rt/selftest.h"

namespace h3rt::py {
namespace {

struct Model {
  Model(std::unique_ptr<Denoiser> d, std::vector<nb::object> keep, std::string id)
      : denoiser(std::move(d)),
        keep_alive(std::move(keep)),
        identity(std::move(id)),
        on_cuda(denoiser->device_name() != "cpu"),
        device(on_cuda ? cuda_current_device() : -1) {}
  std::unique_ptr<Denoiser> denoiser;
  std::vector<nb::object> keep_alive;  // the state dict's arrays the weights view
  std::string identity;                // model_identity() for resume files; "" for state dicts
  bool on_cuda;
  int device;  // the CUDA device it runs on (the current one when loaded); -1 on the CPU
  bool cuda() const { return on_cuda; }
  const H3Config& config() const { return denoiser->config(); }
};

DenoiserOptions options(const std::string& device, const std::optional<std::string>& precision,
                        const std::string& attention, bool cuda_graphs,
                        const std::string& fp8_activations, const std::string& check_finite,
                        const std::string& device_memory_limit,
                        const std::string& weight_stream_source) {
  DenoiserOptions o;
  try {
    o.device_memory_limit = parse_memory_size(device_memory_limit, "device_memory_limit");
    o.weight_stream_source = parse_weight_stream_source(weight_stream_source);
    o.device = parse_device(device);
    if (precision) o.precision = parse_precision(*precision);
    o.attention = parse_attention(attention);
    o.fp8_activations = parse_fp8_activations(fp8_activations);
    o.check_finite = parse_check_finite(check_finite);
  } catch (const Error& e) {
    raise_value(e.what());
  }
  o.cuda_graphs = cuda_graphs;
  return o;
}

// (path or name, None or a mapping of key -> host array, strength), as h3rt._lora_list makes.
using LoraList = std::vector<std::tuple<std::string, nb::object, double>>;

void add_loras(DenoiserOptions& o, const LoraList& loras, bool skip_unmatched) {
  for (const auto& [path, tensors, strength] : loras) {
    LoraSpec spec{path, strength};
    if (!tensors.is_none()) {
      auto map = std::make_shared<std::map<std::string, Tensor>>();
      for (auto [k, v] : nb::cast<nb::dict>(tensors)) {
        const std::string key = nb::cast<std::string>(k);
        AnyArray a;
        if (!nb::try_cast(v, a)) raise_type((path + " '" + key + "': not an array").c_str());
        (*map)[key] = tensor_view(a, path + " '" + key + "'", false);
      }
      spec.tensors = std::move(map);
    }
    o.loras.push_back(std::move(spec));
  }
  o.lora_skip_unmatched = skip_unmatched;
}

QkvLayout qkv_layout_of(const std::string& s) {
  if (s == "auto") return QkvLayout::autodetect;
  if (s == "fused") return QkvLayout::fused_thirds;
  if (s == "per-head") return QkvLayout::per_head_interleaved;
  raise_value(("qkv_layout must be auto, fused or per-head, got '" + s + "'").c_str());
}

nb::dict config_dict(const Model& m) {
  const H3Config& c = m.config();
  nb::dict d;
  d["hidden"] = c.hidden, d["layers"] = c.layers, d["heads"] = c.heads;
  d["head_dim"] = c.head_dim, d["ffn"] = c.ffn, d["text_dim"] = c.text_dim;
  d["in_channels"] = c.in_channels, d["audio_channels"] = c.audio_channels;
  d["refiner_layers"] = c.refiner_layers, d["video_features"] = c.video_features();
  d["freq_dim"] = c.freq_dim, d["time_embed_dim"] = c.time_embed_dim;
  d["time_embed_hidden"] = c.time_embed_hidden, d["rope_freqs"] = c.rope_freqs;
  d["pdd_heads"] = c.pdd_heads, d["adaln_curve_grid"] = c.adaln_curve_grid;
  d["adaln_curve_rank"] = c.adaln_curve_rank;
  d["adaln"] = c.adaln_curve() ? "curve" : "full";
  d["device"] = m.denoiser->device_name();
  d["precision"] = precision_name(m.denoiser->precision());
  return d;
}

// ---- layouts and timestep plans as dicts of numpy arrays ----
nb::dict layout_dict(const SequenceLayout& l) {
  nb::dict d;
  d["text_len"] = l.text_len, d["audio_len"] = l.audio_len, d["frames"] = l.frames;
  d["height"] = l.height, d["width"] = l.width;
  auto sz = [](const auto& v) { return std::vector<size_t>{v.size()}; };
  d["text_indices"] = to_numpy_i64(l.text_indices, sz(l.text_indices));
  d["audio_indices"] = to_numpy_i64(l.audio_indices, sz(l.audio_indices));
  d["video_indices"] = to_numpy_i64(l.video_indices, sz(l.video_indices));
  d["token_tags"] = to_numpy_i64({l.token_tags.begin(), l.token_tags.end()}, sz(l.token_tags));
  d["position_ids"] = to_numpy_f64(l.position_ids, {static_cast<size_t>(l.seq_len()), 3});
  return d;
}

int64_t int_item(const nb::dict& d, const char* key) {
  if (!d.contains(key)) raise_value((std::string("layout: missing '") + key + "'").c_str());
  return nb::cast<int64_t>(d[key]);
}

SequenceLayout layout_of(const nb::dict& d) {
  const int64_t L = int_item(d, "text_len"), N = int_item(d, "audio_len"),
                T = int_item(d, "frames"), H = int_item(d, "height"), W = int_item(d, "width");
  if (L < 1 || N < 0 || T < 1 || H < 2 || W < 2 || H % 2 || W % 2)
    raise_value(
        "layout: need text_len >= 1, audio_len >= 0, frames >= 1, even height and width >= 2");
  SequenceLayout l = make_t2va_layout(L, N, T, H, W);
  auto ints = [&](const char* key, auto& dst) {
    if (!d.contains(key)) return;
    const std::string name = std::string("layout['") + key + "']";
    std::vector<int64_t> v = host_ints(nb::cast<AnyArray>(d[key]), name.c_str(), dst.size());
    for (size_t i = 0; i < v.size(); ++i)
      dst[i] = static_cast<typename std::decay_t<decltype(dst)>::value_type>(v[i]);
  };
  ints("text_indices", l.text_indices);
  ints("audio_indices", l.audio_indices);
  ints("video_indices", l.video_indices);
  ints("token_tags", l.token_tags);
  if (d.contains("position_ids"))
    l.position_ids =
        host_f64(nb::cast<AnyArray>(d["position_ids"]), "layout['position_ids']", 3 * l.seq_len());
  for (const auto* idx : {&l.text_indices, &l.audio_indices, &l.video_indices})
    for (int64_t r : *idx)
      if (r < 0 || r >= l.seq_len()) raise_value("layout: a row index lies outside [0, S)");
  return l;
}

nb::dict plan_dict(const TimestepPlan& p) {
  nb::dict d;
  d["timestep"] = to_numpy(FloatVec(p.timestep.begin(), p.timestep.end()), {p.timestep.size()});
  d["timestep_indices"] = to_numpy_i64(p.timestep_indices, {p.timestep_indices.size()});
  return d;
}

TimestepPlan plan_of(const nb::dict& d, int64_t S) {
  if (!d.contains("timestep") || !d.contains("timestep_indices"))
    raise_value(
        "timesteps: expected a dict with 'timestep' [M] and "
        "'timestep_indices' [S] (h3rt.timestep_plan makes one)");
  TimestepPlan p;
  p.timestep = host_f32_vector(nb::cast<AnyArray>(d["timestep"]), "timesteps['timestep']");
  p.timestep_indices =
      host_ints(nb::cast<AnyArray>(d["timestep_indices"]), "timesteps['timestep_indices']", S);
  for (int64_t i : p.timestep_indices)
    if (i < 0 || i >= static_cast<int64_t>(p.timestep.size()))
      raise_value("timesteps['timestep_indices']: an index lies outside [0, M)");
  return p;
}

// ---- forwards ----
using Outputs = std::pair<nb::object, nb::object>;

FloatVec text_rows(const Model& m, const AnyArray& text, int64_t* length) {
  const int64_t td = m.config().text_dim;
  const std::string want = "[1, L, " + std::to_string(td) + "] or [L, " + std::to_string(td) + "]";
  if (text.ndim() == 3)
    *length = check_shape(text, "text", {1, -1, td}, want)[1];
  else
    *length = check_shape(text, "text", {-1, td}, want)[0];
  if (*length < 1) raise_value("text: needs at least one token");
  return host_f32(text, "text", m.cuda());
}

AnyArray array_arg(nb::handle obj, const char* name) {
  AnyArray a;
  if (!nb::try_cast(obj, a))
    raise_type(std::string(name) + ": expected an array (numpy, torch, cupy, ...), got " +
               nb::cast<std::string>(nb::str(obj.type())));
  return a;
}

// The shape of a call's array: the CUDA array's, or the host array's.
std::vector<int64_t> dims_of(nb::handle obj, const char* name, const CudaArray* dev) {
  return dev ? dev->view.shape() : dims(array_arg(obj, name));
}

// out= is a device forward's: a ValueError for host inputs.
void check_out_needs_device(bool device, nb::handle out) {
  if (!device && !out.is_none()) raise_value("out: only for CUDA inputs (a device forward)");
}

// The target arrays of a call: both in CUDA memory (a device forward; a CUDA model only) or both
// host arrays (nullopt).
std::optional<std::pair<CudaArray, CudaArray>> device_pair(const Model& m, nb::handle video,
                                                           nb::handle audio, const char* vname,
                                                           const char* aname) {
  std::optional<CudaArray> v = cuda_array(video, vname), a = cuda_array(audio, aname);
  if (!v && !a) return std::nullopt;
  if (!m.cuda())
    raise_value(std::string(v ? vname : aname) +
                ": a device array, but the model runs on the CPU; pass a host array");
  if (!v || !a)
    raise_value(std::string(vname) + " and " + aname +
                ": one is a CUDA array and the other is not; pass both on the device (a device "
                "forward) or both on the host");
  return std::make_pair(*v, *a);
}

std::pair<nb::handle, nb::handle> out_pair(nb::handle out) {
  nb::tuple t;
  if (!nb::try_cast(out, t) || t.size() != 2)
    raise_type("out: expected a pair (video, audio) of CUDA arrays");
  return {t[0], t[1]};
}

// Result arrays of `shapes` for a device call: out= when given (checked), else new ones.
struct Results {
  DeviceResult video, audio;
};
Results results(nb::handle out, const Shape& video, const Shape& audio, const DeviceCall& call) {
  Results r;
  if (out.is_none()) {
    r.video = new_result(video, call);
    r.audio = new_result(audio, call);
  } else {
    const auto [v, a] = out_pair(out);
    r.video = given_result(v, "out[0]", video, call);
    r.audio = given_result(a, "out[1]", audio, call);
  }
  return r;
}

// A contiguous float32 buffer the forward writes for `target`: `target` itself when it is one,
// else a new buffer, copied into it after the forward.
Tensor write_buffer(const Tensor& target, const DeviceCall& call) {
  if (target.dtype() == DType::f32 && target.is_contiguous()) return target;
  return device_f32(target.shape(), call.stream);
}

Outputs device_forward(Model& m, const SequenceLayout& l, const TimestepPlan& plan,
                       const std::pair<CudaArray, CudaArray>& rows, const FloatVec& text,
                       const SigmaSchedule* schedule, const DeviceCall& call, nb::handle out) {
  const int64_t nv = l.video_rows(), na = l.audio_rows();
  Results r =
      results(out, {nv, m.config().video_features()}, {na, m.config().audio_channels}, call);
  const Tensor v = contiguous_f32(rows.first.view, call),
               a = contiguous_f32(rows.second.view, call);
  const Tensor wv = write_buffer(r.video.view, call), wa = write_buffer(r.audio.view, call);
  const DeviceIO io{v.ptr<float>(), a.ptr<float>(), wv.ptr<float>(), wa.ptr<float>(), call.stream};
  ForwardInputs in{l, plan, nullptr, nullptr, text.data(), schedule};
  in.device = &io;
  {
    nb::gil_scoped_release release;
    m.denoiser->forward(in);
  }
  if (wv.data() != r.video.view.data()) copy_strided(r.video.view, wv, call.stream);
  if (wa.data() != r.audio.view.data()) copy_strided(r.audio.view, wa, call.stream);
  return {r.video.obj, r.audio.obj};
}

// The video_shift / audio_shift keywords (ValueError naming them when not finite and > 0).
FlowShifts flow_shifts(double video, double audio) {
  const FlowShifts s{video, audio};
  try {
    check_flow_shifts(s);
  } catch (const Error& e) {
    raise_value(e.what());
  }
  return s;
}

Outputs forward(Model& m, nb::handle video_rows, nb::handle audio_rows, nb::handle text_arg,
                const nb::dict& layout, const nb::dict& timesteps, std::optional<float> sigma,
                std::optional<std::vector<float>> sample_sigmas, const FlowShifts& shifts,
                nb::handle out, nb::handle stream) {
  const H3Config& c = m.config();
  const SequenceLayout l = layout_of(layout);
  const TimestepPlan plan = plan_of(timesteps, l.seq_len());
  const int64_t nv = l.video_rows(), na = l.audio_rows();
  const auto dev = device_pair(m, video_rows, audio_rows, "video_rows", "audio_rows");
  const Shape vrows{nv, c.video_features()}, arows{na, c.audio_channels};
  check_shape(dims_of(video_rows, "video_rows", dev ? &dev->first : nullptr), "video_rows", vrows,
              shape_str(vrows));
  check_shape(dims_of(audio_rows, "audio_rows", dev ? &dev->second : nullptr), "audio_rows", arows,
              shape_str(arows));
  check_out_needs_device(dev.has_value(), out);
  const DeviceCall call = dev ? device_call(stream, dev->first, m.device) : DeviceCall{};
  if (dev) {
    check_input(dev->first, "video_rows", call);
    check_input(dev->second, "audio_rows", call);
  }
  const StreamScope scope(call.stream);
  int64_t L = 0;
  const FloatVec t = text_rows(m, array_arg(text_arg, "text"), &L);
  if (L != l.text_len)
    raise_value(("text: " + std::to_string(L) + " tokens, the layout has text_len " +
                 std::to_string(l.text_len))
                    .c_str());
  SigmaSchedule schedule{sigma.value_or(0.0f), sample_sigmas.value_or(std::vector<float>{}),
                         shifts.video, shifts.audio};
  if (sample_sigmas && !sigma) raise_value("sample_sigmas needs sigma (this step's)");
  const SigmaSchedule* sched = sample_sigmas ? &schedule : nullptr;
  if (dev) return device_forward(m, l, plan, *dev, t, sched, call, out);
  const FloatVec v = host_f32(array_arg(video_rows, "video_rows"), "video_rows", m.cuda());
  const FloatVec a = host_f32(array_arg(audio_rows, "audio_rows"), "audio_rows", m.cuda());
  const ForwardInputs in{l, plan, v.data(), a.data(), t.data(), sched};
  ForwardOutputs o;
  {
    nb::gil_scoped_release release;
    o = m.denoiser->forward(in);
  }
  return {nb::cast(to_numpy(std::move(o.video_velocity), {size_t(nv), size_t(c.video_features())})),
          nb::cast(to_numpy(std::move(o.audio_velocity), {size_t(na), size_t(c.audio_channels)}))};
}

// A ComfyUI-layout target: video [1, C, T, H, W], audio [1, Ca, 2, N], text; as h3rt's rows
// (host rows; a device call keeps them on the device, in `dev`).
struct Target {
  int64_t T = 0, H = 0, W = 0, N = 0, L = 0;
  FloatVec video_rows, audio_rows, text;
  std::optional<std::pair<CudaArray, CudaArray>> dev;
  DeviceCall call;
};

Target target_of(const Model& m, nb::handle video, nb::handle audio, nb::handle text,
                 nb::handle stream) {
  const H3Config& c = m.config();
  const std::string C = std::to_string(c.in_channels), Ca = std::to_string(c.audio_channels);
  Target t;
  t.dev = device_pair(m, video, audio, "video", "audio");
  const auto vs =
      check_shape(dims_of(video, "video", t.dev ? &t.dev->first : nullptr), "video",
                  {1, c.in_channels, -1, -1, -1}, "[1, " + C + ", T, H, W] (H and W even)");
  t.T = vs[2], t.H = vs[3], t.W = vs[4];
  if (t.T < 1 || t.H < 2 || t.W < 2 || t.H % 2 || t.W % 2)
    raise_value(("video: expected shape [1, " + C +
                 ", T, H, W] with T >= 1 and even H, W >= 2, got " + shape_str(vs))
                    .c_str());
  t.N = check_shape(dims_of(audio, "audio", t.dev ? &t.dev->second : nullptr), "audio",
                    {1, c.audio_channels, 2, -1},
                    "[1, " + Ca + ", 2, N] (ComfyUI's audio latent)")[3];
  if (t.dev) {
    t.call = device_call(stream, t.dev->first, m.device);
    check_input(t.dev->first, "video", t.call);
    check_input(t.dev->second, "audio", t.call);
  }
  const StreamScope scope(t.call.stream);
  t.text = text_rows(m, array_arg(text, "text"), &t.L);
  if (t.dev) return t;
  const FloatVec v = host_f32(array_arg(video, "video"), "video", m.cuda());
  const FloatVec a = host_f32(array_arg(audio, "audio"), "audio", m.cuda());
  t.video_rows = patchify_video(v.data(), c.in_channels, t.T, t.H, t.W);
  t.audio_rows = comfy_audio_to_rows(a, c.audio_channels, t.N);
  return t;
}

Outputs comfy_outputs(const H3Config& c, const Target& t, const ForwardOutputs& out) {
  const size_t C = c.in_channels, Ca = c.audio_channels;
  return {nb::cast(to_numpy(unpatchify_video(out.video_velocity.data(), C, t.T, t.H, t.W),
                            {1, C, size_t(t.T), size_t(t.H), size_t(t.W)})),
          nb::cast(
              to_numpy(rows_to_comfy_audio(out.audio_velocity, Ca, t.N), {1, Ca, 2, size_t(t.N)}))};
}

// One evaluation of `r` (layout, text, conditioning) on a device target
// (forward_device_latents: patchify and the audio axis swap on the device, the forward into
// device rows, the inverse into the results).
Outputs device_request(Model& m, Request& r, const Target& t, float sigma, EvalOptions o,
                       nb::handle out) {
  const H3Config& c = m.config();
  const int64_t C = c.in_channels, Ca = c.audio_channels;
  const DeviceCall& call = t.call;
  Results res = results(out, {1, C, t.T, t.H, t.W}, {1, Ca, 2, t.N}, call);
  {
    const StreamScope scope(call.stream);
    nb::gil_scoped_release release;
    forward_device_latents(*m.denoiser, r, sigma, t.dev->first.view, t.dev->second.view,
                           res.video.view, res.audio.view, call.stream, o);
  }
  return {res.video.obj, res.audio.obj};
}

Outputs forward_latents(Model& m, nb::handle video, nb::handle audio, float sigma, nb::handle text,
                        std::optional<std::vector<float>> sample_sigmas, const FlowShifts& shifts,
                        nb::handle out, nb::handle stream) {
  Target t = target_of(m, video, audio, text, stream);
  check_out_needs_device(t.dev.has_value(), out);
  const SequenceLayout l = make_t2va_layout(t.L, t.N, t.T, t.H, t.W);
  if (t.dev) {
    Request r;
    r.layout = l;
    r.text = std::move(t.text);
    EvalOptions o;
    o.sample_sigmas = sample_sigmas.value_or(std::vector<float>{});
    o.shifts = shifts;
    return device_request(m, r, t, sigma, o, out);
  }
  ForwardOutputs o;
  {
    nb::gil_scoped_release release;
    o = forward_at_sigma(*m.denoiser, l, t.video_rows.data(), t.audio_rows.data(), t.text.data(),
                         sigma, sample_sigmas.value_or(std::vector<float>{}), shifts);
  }
  return comfy_outputs(m.config(), t, o);
}

// expect_layout (a mapping: "segments", (start, stop, kind) triples, and "position_ids" [S, 3]
// float64, as ComfyUI's PackedLayout holds them) against the request's layout: ValueError naming
// the first difference.
void check_expected_layout(nb::handle expect, const SequenceLayout& l) {
  if (expect.is_none()) return;
  std::vector<NamedSegment> segs;
  std::vector<double> pos;
  bool bad = false;
  try {
    for (nb::handle s : expect["segments"]) {
      nb::sequence t = nb::cast<nb::sequence>(s);
      if (nb::len(t) != 3) raise_value("expect_layout['segments']: expected (start, stop, kind)");
      segs.push_back(
          {nb::cast<int64_t>(t[0]), nb::cast<int64_t>(t[1]), nb::cast<std::string>(t[2])});
    }
    const AnyArray p = nb::cast<AnyArray>(expect["position_ids"]);
    const Shape d = dims(p);
    if (d.size() != 2 || d[1] != 3)
      raise_value("expect_layout['position_ids']: expected shape [S, 3], got " + shape_str(d));
    pos = host_f64(p, "expect_layout['position_ids']", d[0] * 3);
  } catch (const nb::cast_error&) {
    bad = true;
  } catch (const nb::python_error&) {  // a missing key, a segment that is not a sequence
    bad = true;
  }
  if (bad)
    raise_value(
        "expect_layout: expected a mapping with 'segments' ((start, stop, kind) triples) "
        "and 'position_ids' (a float64 array [S, 3])");
  const std::string diff = layout_difference(l, segs, pos);
  if (!diff.empty()) raise_value("expect_layout differs from h3rt's layout: " + diff);
}

// ComfyUI's MiniMaxH3Model.forward with a payload: its layout, timesteps, condition rows, masks
// and audio carry (forward_request), on ComfyUI-layout latents.
Outputs forward_conditioned(Model& m, nb::handle video, nb::handle audio, float sigma,
                            nb::handle text, std::optional<std::vector<float>> sample_sigmas,
                            const ConditioningArgs& args, float audio_scale, bool mask_outputs,
                            const FlowShifts& shifts, nb::handle expect_layout, nb::handle out,
                            nb::handle stream) {
  Target t = target_of(m, video, audio, text, stream);
  check_out_needs_device(t.dev.has_value(), out);
  if (!(sigma >= 0.0f && sigma <= 1.0f))
    raise_value("sigma must lie in [0, 1], got " + std::to_string(sigma));
  if (!(audio_scale > 0.0f))
    raise_value("audio_scale must be > 0, got " + std::to_string(audio_scale));
  if (t.dev && audio_scale != 1.0f)
    raise_value(
        "audio_scale: the audio carry runs on host arrays only; pass audio_scale=1 "
        "with CUDA inputs (ComfyUI's forward applies it around _forward)");
  Request r;
  r.layout = make_t2va_layout(t.L, t.N, t.T, t.H, t.W);
  r.video_rows = std::move(t.video_rows);
  r.audio_rows = std::move(t.audio_rows);
  r.text = std::move(t.text);
  Conditioning k;
  {
    const StreamScope scope(t.call.stream);
    k = conditioning_of(m.config(), args, t.L, m.cuda());
  }
  if (t.dev && mask_outputs && (!k.video_mask.empty() || !k.audio_mask.empty()))
    raise_value(
        "mask_outputs: the output mask multiply runs on host arrays only; pass "
        "mask_outputs=False with CUDA inputs and denoise masks");
  try {
    condition_request(r, m.config(), std::move(k));
  } catch (const Error& e) {
    raise_value(e.what());
  }
  check_expected_layout(expect_layout, r.layout);
  EvalOptions o;
  o.sample_sigmas = sample_sigmas.value_or(std::vector<float>{});
  o.audio_scale = audio_scale;
  o.mask_outputs = mask_outputs;
  o.shifts = shifts;
  if (t.dev) return device_request(m, r, t, sigma, o, out);
  ForwardOutputs v;
  {
    nb::gil_scoped_release release;
    v = forward_request(*m.denoiser, r, sigma, o);
  }
  return comfy_outputs(m.config(), t, v);
}

// ---- sampling ----
// The loop's options from Python's keywords (option words checked, ValueError naming them).
struct SamplingKeywords {
  std::string sampler, scheduler;
  double shift, audio_shift;
  std::optional<std::string> checkpoint, resume;
  int checkpoint_every;
  HybridSettings hybrid;  // h3rt/hybrid.h: sparse attention from step dense_steps on, caching
};

SampleOptions sample_options(const Model& m, int steps, uint64_t seed, const SamplingKeywords& k) {
  if (steps < 1 || steps > 1000)
    raise_value(("steps must be in [1, 1000], got " + std::to_string(steps)).c_str());
  if (k.checkpoint_every < 0 || (k.checkpoint_every > 0 && !k.checkpoint))
    raise_value("checkpoint_every must be >= 0 and needs checkpoint (a file path)");
  SampleOptions so;
  try {
    so.sampler = parse_sampler(k.sampler);
    so.scheduler = parse_scheduler(k.scheduler);
  } catch (const Error& e) {
    raise_value(e.what());
  }
  so.steps = steps;
  so.video_shift = k.shift;
  so.audio_shift = k.audio_shift;
  so.noise_seed = seed;
  so.checkpoint_path = k.checkpoint.value_or("");
  so.resume_path = k.resume.value_or("");
  so.checkpoint_every = k.checkpoint_every;
  so.model_identity = m.identity;
  try {
    const HybridPolicy p = hybrid_policy(k.hybrid);
    so.hybrid = p.hybrid;
    so.step_cache = p.step_cache;
  } catch (const Error& e) {
    raise_value(e.what());
  }
  return so;
}

// A check step's record (h3rt/hybrid.h SparseCheckRecord) as a dict; None on other steps.
nb::object check_dict(const SparseCheckRecord& k) {
  if (!k.checked) return nb::none();
  nb::dict d;
  nb::list blocks, rel, turned;
  for (size_t b = 0; b < k.blocks.size(); ++b) {
    blocks.append(k.blocks[b]);
    nb::list row;
    for (int64_t h = 0; h < k.heads; ++h) row.append(k.rel_l1[b * k.heads + h]);
    rel.append(row);
  }
  for (const int64_t t : k.turned_dense) turned.append(nb::make_tuple(t / k.heads, t % k.heads));
  d["tiles_per_block"] = k.tiles;
  d["blocks"] = blocks;
  d["rel_l1"] = rel;
  d["turned_dense"] = turned;
  d["dense_heads"] = k.dense_heads;
  return d;
}

// SampleResult::hybrid_steps as dicts (None for figures a step did not have).
nb::list hybrid_list(const std::vector<HybridStep>& steps) {
  nb::list out;
  const auto number = [](double v) { return std::isnan(v) ? nb::none() : nb::cast(v); };
  for (const HybridStep& h : steps) {
    nb::dict d;
    d["attention"] = h.sparse ? "sparse" : "dense";
    d["sparse_fraction"] = number(h.sparse_fraction);
    d["step_cache"] = !h.cache.checked ? "off" : h.cache.reused ? "reused" : "computed";
    d["relative_l1"] = number(h.cache.rel_l1);
    d["sparse_check"] = check_dict(h.check);
    out.append(d);
  }
  return out;
}

// Denoise masks and the clean latents they keep (sample's inpainting; None: absent).
struct SampleMasks {
  std::optional<AnyArray> video_mask, audio_mask, video_image, audio_image;
  bool any() const { return video_mask || audio_mask || video_image || audio_image; }
};

// The request's target shapes for each array, checked; ComfyUI's semantics (condition_request).
void add_masks(const Model& m, Request& req, const SampleMasks& a) {
  const SequenceLayout L = req.layout;
  const H3Config& c = m.config();
  const auto values = [&](const std::optional<AnyArray>& v, const char* name, const Shape& want) {
    if (!v) return FloatVec{};
    check_shape(*v, name, want, shape_str(want));
    return host_f32(*v, name, m.cuda());
  };
  Conditioning k;
  k.video_mask = values(a.video_mask, "video_denoise_mask", {L.frames, L.height, L.width});
  k.audio_mask = values(a.audio_mask, "audio_denoise_mask", {2, L.audio_len});
  k.video_latent_image =
      values(a.video_image, "video_latent_image", {1, c.in_channels, L.frames, L.height, L.width});
  k.audio_latent_image =
      values(a.audio_image, "audio_latent_image", {2, c.audio_channels, L.audio_len});
  condition_request(req, c, std::move(k));
}

nb::dict sample(Model& m, int64_t width, int64_t height, int64_t frames, int steps, uint64_t seed,
                std::optional<AnyArray> text, nb::object progress, double audio_seconds,
                int64_t text_tokens, const SamplingKeywords& k, const SampleMasks& masks) {
  RequestOptions r;
  r.width = width, r.height = height, r.frames = frames, r.seed = seed;
  r.audio_seconds = audio_seconds, r.text_tokens = text_tokens;
  if (text) {
    int64_t L = 0;
    r.text = text_rows(m, *text, &L);
  }
  SampleOptions so = sample_options(m, steps, seed, k);
  Request req = make_request(m.config(), r);
  if (masks.any()) add_masks(m, req, masks);
  const bool saves = !so.checkpoint_path.empty();
  so.progress = [&progress, saves](int step, int total, double seconds) {
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {  // Ctrl-C stops the loop (saving: h3rt.Cancelled)
      if (!saves) throw nb::python_error();
      PyErr_Clear();
      return false;
    }
    if (progress.is_none()) return true;
    nb::object go_on = progress(step, total, seconds);
    return go_on.is_none() || nb::cast<bool>(go_on);
  };
  SampleResult res;
  {
    nb::gil_scoped_release release;
    res = h3rt::sample(*m.denoiser, std::move(req), so);
  }
  auto dims = [](const Shape& s) { return std::vector<size_t>(s.begin(), s.end()); };
  nb::list stages;
  for (const StageSeconds& st : res.stages) {
    nb::dict d;
    d["packing"] = st.packing, d["denoiser"] = st.denoiser;
    d["sampler_update"] = st.sampler_update, d["output_transform"] = st.output_transform;
    stages.append(d);
  }
  nb::dict out;
  out["video_latents"] = to_numpy(std::move(res.video_latents), dims(res.video_shape));
  out["audio_latents"] = to_numpy(std::move(res.audio_latents), dims(res.audio_shape));
  out["stages"] = stages;
  out["sigmas"] = res.video_sigmas;
  out["resumed_steps"] = res.resumed_steps;
  out["hybrid"] = hybrid_list(res.hybrid_steps);
  out["sampler_state"] = res.device_loop ? "device" : "host";
  return out;
}

// load_progress(done, total) as the blocks are placed (CUDA), under the GIL; Ctrl-C stops the
// load (KeyboardInterrupt).
void set_load_progress(DenoiserOptions& o, const nb::object& progress) {
  if (progress.is_none()) return;
  o.load_progress = [progress](int done, int total) {
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    progress(done, total);
  };
}

Model* load_path(const std::string& path, const std::string& device,
                 std::optional<std::string> precision, const std::string& attention,
                 bool cuda_graphs, const std::string& fp8, const std::string& qkv,
                 const LoraList& loras, bool lora_skip_unmatched, const std::string& check_finite,
                 const std::string& limit, const std::string& source, nb::object progress) {
  ModelSource s;
  s.checkpoint = path;
  s.qkv_layout = qkv_layout_of(qkv);
  auto o = options(device, precision, attention, cuda_graphs, fp8, check_finite, limit, source);
  set_load_progress(o, progress);
  add_loras(o, loras, lora_skip_unmatched);
  nb::gil_scoped_release release;
  return new Model{Denoiser::create(s, o), {}, model_identity(s, o)};
}

Model* load_preset(const std::string& name, uint64_t weights_seed, const std::string& device,
                   std::optional<std::string> precision, const std::string& attention,
                   bool cuda_graphs, const std::string& check_finite, const std::string& gemm,
                   int int8_group, const std::string& limit, const std::string& source,
                   nb::object progress) {
  ModelSource s;
  s.preset = name;
  s.weights_seed = weights_seed;
  auto o =
      options(device, precision, attention, cuda_graphs, "static", check_finite, limit, source);
  try {
    o.synthetic_gemm = parse_synthetic_gemm(gemm);
  } catch (const Error& e) {
    raise_value(e.what());
  }
  o.int8_group = int8_group;
  set_load_progress(o, progress);
  nb::gil_scoped_release release;
  return new Model{Denoiser::create(s, o), {}, model_identity(s, o)};
}

Model* load_state_dict(const nb::dict& state, const std::string& device,
                       std::optional<std::string> precision, const std::string& attention,
                       bool cuda_graphs, const std::string& fp8, const std::string& qkv,
                       const LoraList& loras, bool lora_skip_unmatched,
                       const std::string& check_finite, const std::string& limit,
                       const std::string& source, nb::object progress) {
  std::map<std::string, Tensor> tensors;
  std::vector<nb::object> keep;
  for (auto [k, v] : state) {
    const std::string key = nb::cast<std::string>(k);
    AnyArray a;
    if (!nb::try_cast(v, a))
      raise_type(("state dict '" + key + "': not an array (numpy, torch, ...)").c_str());
    tensors[key] = tensor_view(a, key, device == "cuda");
    keep.push_back(nb::borrow(v));
  }
  const QkvLayout layout = qkv == "auto" ? QkvLayout::fused_thirds : qkv_layout_of(qkv);
  auto o = options(device, precision, attention, cuda_graphs, fp8, check_finite, limit, source);
  add_loras(o, loras, lora_skip_unmatched);
  set_load_progress(o, progress);
  std::unique_ptr<Denoiser> d;
  {
    nb::gil_scoped_release release;
    d = Denoiser::create(tensors, o, layout);
  }
  return new Model{std::move(d), std::move(keep), {}};
}

}  // namespace
}  // namespace h3rt::py

NB_MODULE(_h3rt, m) {
  using namespace h3rt::py;
  using nb::arg;
  m.doc() = "h3rt: the C++/CUDA runtime for MiniMax H3 (see h3rt/__init__.py)";
  nb::exception<h3rt::Cancelled>(m, "Cancelled", PyExc_RuntimeError);

  nb::class_<Model>(m, "Model", "A MiniMax H3 model loaded on a device (h3rt.load).")
      .def_prop_ro("config", &config_dict, "The model's dimensions and variant, as a dict.")
      .def_prop_ro("device", [](const Model& x) { return x.denoiser->device_name(); })
      .def_prop_ro(
          "precision",
          [](const Model& x) { return std::string(h3rt::precision_name(x.denoiser->precision())); })
      .def_prop_ro(
          "device_peak_bytes", [](const Model& x) { return x.denoiser->device_peak_bytes(); },
          "(allocated, reserved) peak bytes of h3rt's device memory pool, (0, 0) on the CPU.")
      .def_prop_ro(
          "lora_report",
          [](const Model& x) {
            const h3rt::LoraMergeReport& r = x.denoiser->lora_report();
            nb::dict d;
            d["pairs"] = r.pairs, d["layers"] = r.layers, d["warnings"] = r.warnings;
            return d;
          },
          "What load(loras=...) merged: pairs, layers, a warning per skipped pair.")
      .def_prop_ro(
          "weight_streaming",
          [](const Model& x) {  // the reports' object, one spelling (to_json)
            const std::string j = h3rt::to_json(x.denoiser->weight_streaming()).dump();
            return nb::module_::import_("json").attr("loads")(j);
          },
          "How device_memory_limit placed the block weights (the reports' weight_streaming).")
      .def(
          "forward",
          [](Model& m, nb::handle video_rows, nb::handle audio_rows, nb::handle text,
             const nb::dict& layout, const nb::dict& timesteps, std::optional<float> sigma,
             std::optional<std::vector<float>> sample_sigmas, double video_shift,
             double audio_shift, nb::handle out, nb::handle stream) {
            return forward(m, video_rows, audio_rows, text, layout, timesteps, sigma,
                           std::move(sample_sigmas), flow_shifts(video_shift, audio_shift), out,
                           stream);
          },
          arg("video_rows"), arg("audio_rows"), arg("text"), nb::kw_only(), arg("layout"),
          arg("timesteps"), arg("sigma") = nb::none(), arg("sample_sigmas") = nb::none(),
          arg("video_shift") = double(h3rt::kVideoShift),
          arg("audio_shift") = double(h3rt::kAudioShift), arg("out").none() = nb::none(),
          arg("stream").none() = nb::none(), "Low-level forward on packed rows (see the .pyi).")
      .def(
          "forward_latents",
          [](Model& m, nb::handle video, nb::handle audio, float sigma, nb::handle text,
             std::optional<std::vector<float>> sample_sigmas, double video_shift,
             double audio_shift, nb::handle out, nb::handle stream) {
            return forward_latents(m, video, audio, sigma, text, std::move(sample_sigmas),
                                   flow_shifts(video_shift, audio_shift), out, stream);
          },
          arg("video"), arg("audio"), arg("sigma"), arg("text"), arg("sample_sigmas") = nb::none(),
          nb::kw_only(), arg("video_shift") = double(h3rt::kVideoShift),
          arg("audio_shift") = double(h3rt::kAudioShift), arg("out").none() = nb::none(),
          arg("stream").none() = nb::none(),
          "Velocities of ComfyUI-layout latents at video sigma (see the .pyi).")
      .def(
          "forward_conditioned",
          [](Model& m, nb::handle video, nb::handle audio, float sigma, nb::handle text,
             std::optional<std::vector<float>> sample_sigmas, nb::list keyframes, nb::list refs,
             std::optional<AnyArray> text_tags, std::optional<AnyArray> video_mask,
             std::optional<AnyArray> audio_mask, double visual_aug, double audio_aug,
             uint64_t noise_seed, float audio_scale, bool mask_outputs, double video_shift,
             double audio_shift, nb::handle expect_layout, nb::handle out, nb::handle stream) {
            const ConditioningArgs a{keyframes,  refs,       text_tags, video_mask,
                                     audio_mask, visual_aug, audio_aug, noise_seed};
            return forward_conditioned(
                m, video, audio, sigma, text, std::move(sample_sigmas), a, audio_scale,
                mask_outputs, flow_shifts(video_shift, audio_shift), expect_layout, out, stream);
          },
          arg("video"), arg("audio"), arg("sigma"), arg("text"), arg("sample_sigmas") = nb::none(),
          nb::kw_only(), arg("keyframes") = nb::list(), arg("refs") = nb::list(),
          arg("text_tags") = nb::none(), arg("video_mask") = nb::none(),
          arg("audio_mask") = nb::none(), arg("visual_cond_noise_aug") = h3rt::kVisualCondTimestep,
          arg("audio_cond_noise_aug") = h3rt::kAudioCondTimestep, arg("noise_seed") = 0,
          arg("audio_scale") = 1.0f, arg("mask_outputs") = true,
          arg("video_shift") = double(h3rt::kVideoShift),
          arg("audio_shift") = double(h3rt::kAudioShift), arg("expect_layout").none() = nb::none(),
          arg("out").none() = nb::none(), arg("stream").none() = nb::none(),
          "ComfyUI's forward with a conditioning payload, on ComfyUI-layout latents (.pyi).");

  m.def("_load_path", &load_path, arg("path"), arg("device"), arg("precision").none(),
        arg("attention"), arg("cuda_graphs"), arg("fp8_activations"), arg("qkv_layout"),
        arg("loras"), arg("lora_skip_unmatched"), arg("check_finite"), arg("device_memory_limit"),
        arg("weight_stream_source"), arg("load_progress").none(), nb::rv_policy::take_ownership);
  m.def("_load_preset", &load_preset, arg("name"), arg("weights_seed"), arg("device"),
        arg("precision").none(), arg("attention"), arg("cuda_graphs"), arg("check_finite"),
        arg("gemm"), arg("int8_group"), arg("device_memory_limit"), arg("weight_stream_source"),
        arg("load_progress").none(), nb::rv_policy::take_ownership);
  m.def("_load_state_dict", &load_state_dict, arg("state_dict"), arg("device"),
        arg("precision").none(), arg("attention"), arg("cuda_graphs"), arg("fp8_activations"),
        arg("qkv_layout"), arg("loras"), arg("lora_skip_unmatched"), arg("check_finite"),
        arg("device_memory_limit"), arg("weight_stream_source"), arg("load_progress").none(),
        nb::rv_policy::take_ownership);
  m.def(
      "_sample",
      [](Model& model, int64_t width, int64_t height, int64_t frames, int steps, uint64_t seed,
         std::optional<AnyArray> text, nb::object progress, double audio_seconds,
         int64_t text_tokens, const std::string& sampler, const std::string& scheduler,
         double shift, double audio_shift, std::optional<std::string> checkpoint,
         int checkpoint_every, std::optional<std::string> resume, float sparse_attention,
         int dense_steps, int dense_blocks, double step_cache, int step_cache_max, int sparse_check,
         double sparse_check_bound, std::optional<AnyArray> video_mask,
         std::optional<AnyArray> audio_mask, std::optional<AnyArray> video_image,
         std::optional<AnyArray> audio_image) {
        const h3rt::HybridSettings hybrid{sparse_attention,  dense_steps,    dense_blocks,
                                          step_cache,        step_cache_max, sparse_check,
                                          sparse_check_bound};
        const SamplingKeywords k{sampler, scheduler,        shift, audio_shift, checkpoint,
                                 resume,  checkpoint_every, hybrid};
        return sample(model, width, height, frames, steps, seed, std::move(text), progress,
                      audio_seconds, text_tokens, k,
                      {video_mask, audio_mask, video_image, audio_image});
      },
      arg("model"), arg("width"), arg("height"), arg("frames"), arg("steps"), arg("seed"),
      arg("text").none(), arg("progress").none(), arg("audio_seconds"), arg("text_tokens"),
      arg("sampler"), arg("scheduler"), arg("shift"), arg("audio_shift"), arg("checkpoint").none(),
      arg("checkpoint_every"), arg("resume").none(), arg("sparse_attention"), arg("dense_steps"),
      arg("dense_blocks"), arg("step_cache"), arg("step_cache_max"), arg("sparse_check"),
      arg("sparse_check_bound"), arg("video_denoise_mask").none(), arg("audio_denoise_mask").none(),
      arg("video_latent_image").none(), arg("audio_latent_image").none());
  m.def("simple_sigmas", &h3rt::simple_sigmas, arg("steps"), arg("shift") = h3rt::kVideoShift,
        "ComfyUI's simple schedule at `shift` (ModelSamplingAV's table): steps + 1 sigmas.");
  m.def(
      "t2va_layout",
      [](int64_t text_len, int64_t audio_len, int64_t frames, int64_t height, int64_t width) {
        return layout_dict(h3rt::make_t2va_layout(text_len, audio_len, frames, height, width));
      },
      arg("text_len"), arg("audio_len"), arg("frames"), arg("height"), arg("width"),
      "The packed t2va layout [text | audio | video] as a dict of sizes and numpy arrays.");
  m.def(
      "timestep_plan",
      [](const nb::dict& layout, float t_video, float t_audio) {
        return plan_dict(h3rt::make_timestep_plan(layout_of(layout), t_video, t_audio));
      },
      arg("layout"), arg("t_video"), arg("t_audio"),
      "Per-row timesteps: {'timestep': [M] ascending, 'timestep_indices': [S]}.");
  m.def("sigma_grid", &h3rt::sigma_grid, arg("points"), arg("shift") = h3rt::kVideoShift,
        "The sampler's shifted sigma grid of `points` points, terminal 0 included.");
  m.def("audio_sigma_from_video", &h3rt::audio_sigma_from_video, arg("sigma"),
        arg("video_shift") = h3rt::kVideoShift, arg("audio_shift") = h3rt::kAudioShift);
  m.def(
      "latent_shape",
      [](int64_t width, int64_t height, int64_t frames) {
        h3rt::LatentShape l{};
        try {
          l = h3rt::latent_shape_for(width, height, frames, {0, 0, 0, 0});
        } catch (const h3rt::Error& e) {
          raise_value(e.what());
        }
        nb::dict d;
        d["frames"] = l.frames, d["height"] = l.height, d["width"] = l.width, d["audio"] = l.audio;
        return d;
      },
      arg("width"), arg("height"), arg("frames"),
      "The latents of a width x height video of `frames` frames (its audio at frames / 24 s), "
      "as `h3rt sample --width --height --frames` makes them.");
  m.def(
      "_selftest",
      [](uint64_t seed) {
        h3rt::SelftestOptions o;
        o.seed = seed;
        nb::gil_scoped_release release;
        return h3rt::to_json(h3rt::selftest(o)).dump();
      },
      arg("seed"));
  m.def("_untested_arch_note",
        [] { return h3rt::untested_arch_note(h3rt::cuda_device_cc(h3rt::cuda_current_device())); });
  m.def(
      "build_info",
      [] {
        const h3rt::BuildInfo b = h3rt::build_info();
        nb::dict d;
        d["version"] = b.version, d["cuda"] = b.cuda, d["cuda_archs"] = b.cuda_archs;
        d["cuda_build_version"] = b.cuda_build_version;
        d["cuda_driver_version"] = b.cuda_driver_version;
        d["cutlass_int8_sm90"] = b.cutlass_int8_sm90, d["cutlass_int8_sm80"] = b.cutlass_int8_sm80;
        d["summary"] = h3rt::build_summary(b);
        return d;
      },
      "What this build holds, as `h3rt --version` prints it (\"summary\"): version, CUDA backend "
      "and its archs (\"90a,121a\"), the CUDA toolkit it was built with and the one the driver "
      "runs (13000 = 13.0; 0: no driver), and whether the int8 GEMMs run CUTLASS on sm_90 and "
      "sm_12x. Needs no GPU.");
  m.attr("__version__") = H3RT_VERSION_STRING;
}
