// `h3rt prune-adaln`: a curve-form AdaLN checkpoint from a full one (see h3rt/adaln_curve.h).
// The basis is fitted on the AdaLN *input* curve silu(TE(t)) (Tm values per grid row), so no
// [grid, 18H x blocks] output matrix is ever formed; its error is then measured on the outputs.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "h3rt/adaln_curve.h"
#include "h3rt/check.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "ops/linear/linear.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt {

namespace {

using Mat = std::vector<double>;  // row-major

// silu(time_embedder(t)) in float32 for each t, as the full form's forward computes it.
std::vector<float> curve_at(const SafetensorsFile& f, const H3Config& c,
                            const std::vector<float>& t) {
  const auto get = [&](const char* key) { return f.get(key).to_f32(); };
  const std::vector<float> w_in = get("time_embedder.proj_in.weight"),
                           b_in = get("time_embedder.proj_in.bias"),
                           w_out = get("time_embedder.proj_out.weight"),
                           b_out = get("time_embedder.proj_out.bias");
  const int64_t n = static_cast<int64_t>(t.size());
  std::vector<float> sinusoid(n * c.freq_dim), temb(n * c.time_embed_dim);
  ops::time_embedding_cpu({t.data(), w_in.data(), b_in.data(), w_out.data(), b_out.data(),
                           sinusoid.data(), temb.data(), n, c.freq_dim, c.time_embed_hidden,
                           c.time_embed_dim});
  for (float& v : temb) v = ops::silu(v);
  return temb;
}

// Orthonormalizes the k columns of V [d, k] in place (modified Gram-Schmidt, twice).
void orthonormalize(Mat& V, int64_t d, int64_t k) {
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t p = 0; p < j; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += V[i * k + j] * V[i * k + p];
        for (int64_t i = 0; i < d; ++i) V[i * k + j] -= dot * V[i * k + p];
      }
      double norm = 0;
      for (int64_t i = 0; i < d; ++i) norm += V[i * k + j] * V[i * k + j];
      norm = std::sqrt(norm);
      for (int64_t i = 0; i < d; ++i) V[i * k + j] = norm > 0 ? V[i * k + j] / norm : 0.0;
    }
}

// Eigen-decomposition of the symmetric k x k matrix A (cyclic Jacobi): eigenvalues on return in
// A's diagonal, eigenvectors in the columns of Q.
void jacobi_eigen(Mat& A, Mat& Q, int64_t k) {
  Q.assign(k * k, 0.0);
  for (int64_t i = 0; i < k; ++i) Q[i * k + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) (i == j ? diag : off) += A[i * k + j] * A[i * k + j];
    if (off <= 1e-30 * diag) return;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) {
        const double apq = A[p * k + q];
        if (apq == 0) continue;
        const double theta = (A[q * k + q] - A[p * k + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double cs = 1 / std::sqrt(t * t + 1), sn = t * cs;
        for (int64_t r = 0; r < k; ++r) {  // A = J^T A J, Q = Q J
          const double arp = A[r * k + p], arq = A[r * k + q];
          A[r * k + p] = cs * arp - sn * arq;
          A[r * k + q] = sn * arp + cs * arq;
        }
        for (int64_t r = 0; r < k; ++r) {
          const double apr = A[p * k + r], aqr = A[q * k + r];
          A[p * k + r] = cs * apr - sn * aqr;
          A[q * k + r] = sn * apr + cs * aqr;
        }
        for (int64_t r = 0; r < k; ++r) {
          const double qrp = Q[r * k + p], qrq = Q[r * k + q];
          Q[r * k + p] = cs * qrp - sn * qrq;
          Q[r * k + q] = sn * qrp + cs * qrq;
        }
      }
  }
}

// The top `rank` principal directions V [d, rank] of the centered rows C [n, d]: subspace
// iteration on C^T C (applied as C^T (C V), never formed) with a few extra columns, then
// Rayleigh-Ritz. Returns the fraction of the total energy the directions keep.
double principal_directions(const Mat& C, int64_t n, int64_t d, int64_t rank, Mat& V) {
  const int64_t k = std::min(d, rank + 8);
  Mat Vk(d * k);
  for (int64_t i = 0; i < d; ++i)  // a deterministic, generic start
    for (int64_t j = 0; j < k; ++j) Vk[i * k + j] = std::sin(1.0 + 0.7 * i + 1.3 * j * (i + 1));
  orthonormalize(Vk, d, k);
  Mat B(n * k);
  auto apply_c = [&](const Mat& X) {  // B = C X
    std::fill(B.begin(), B.end(), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < d; ++i) {
        const double cri = C[r * d + i];
        if (cri != 0)
          for (int64_t j = 0; j < k; ++j) B[r * k + j] += cri * X[i * k + j];
      }
  };
  for (int it = 0; it < 300; ++it) {
    apply_c(Vk);
    Mat Y(d * k, 0.0);  // Y = C^T B
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < d; ++i) {
        const double cri = C[r * d + i];
        if (cri != 0)
          for (int64_t j = 0; j < k; ++j) Y[i * k + j] += cri * B[r * k + j];
      }
    orthonormalize(Y, d, k);
    double change = 0;  // 1 - |cos| between successive subspaces' columns
    for (int64_t j = 0; j < k; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += Y[i * k + j] * Vk[i * k + j];
      change = std::max(change, 1 - std::fabs(dot));
    }
    Vk = std::move(Y);
    if (change < 1e-15) break;
  }
  apply_c(Vk);
  Mat A(k * k, 0.0), Q;  // A = (C V)^T (C V)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) A[a * k + b] += B[r * k + a] * B[r * k + b];
  jacobi_eigen(A, Q, k);
  std::vector<int64_t> order(k);
  for (int64_t j = 0; j < k; ++j) order[j] = j;
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return A[a * k + a] > A[b * k + b]; });
  V.assign(d * rank, 0.0);
  double kept = 0, total = 0;
  for (double v : C) total += v * v;
  for (int64_t j = 0; j < rank; ++j) {
    kept += A[order[j] * k + order[j]];
    for (int64_t i = 0; i < d; ++i)
      for (int64_t p = 0; p < k; ++p) V[i * rank + j] += Vk[i * k + p] * Q[p * k + order[j]];
  }
  return total > 0 ? kept / total : 1.0;
}

// One AdaLN linear of the file, as float values.
struct Layer {
  std::string name;
  int64_t out = 0, in = 0;
  std::vector<float> w, b;
};

Layer read_layer(const SafetensorsFile& f, const std::string& name, int64_t in) {
  for (const char* aux : {".comfy_quant", ".weight_scale", ".weight_scale_2", ".input_scale"})
    H3RT_CHECK(!f.contains(name + aux), f.path(), ": AdaLN layer '", name,
               "' is quantized (it has '", name + aux, "'); prune-adaln needs float weights");
  const Tensor w = f.get(name + ".weight"), b = f.get(name + ".bias");
  H3RT_CHECK((w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16) &&
                 w.dim() == 2 && w.size(1) == in && b.dim() == 1 && b.size(0) == w.size(0),
             f.path(), ": AdaLN layer '", name, "' is ", dtype_name(w.dtype()), " ",
             shape_str(w.shape()), " with bias ", shape_str(b.shape()), ", expected float [*, ", in,
             "] and [*]");
  return {name, w.size(0), in, w.to_f32(), b.to_f32()};
}

// y [rows, out] = x W^T + b with the CPU reference's linear (double sums, one rounding).
std::vector<float> linear(const std::vector<float>& x, int64_t rows, const std::vector<float>& w,
                          const std::vector<float>& b, int64_t in, int64_t out) {
  std::vector<float> y(rows * out);
  ops::linear_cpu({.x = x.data(),
                   .w = w.data(),
                   .bias = b.data(),
                   .y = y.data(),
                   .rows = rows,
                   .in = in,
                   .out = out});
  return y;
}

struct ErrorSums {
  double max_abs = 0, diff2 = 0, ref2 = 0;
  void add(const std::vector<float>& got, const std::vector<float>& ref) {
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = double(got[i]) - ref[i];
      max_abs = std::max(max_abs, std::fabs(d));
      diff2 += d * d;
      ref2 += double(ref[i]) * ref[i];
    }
  }
  CurveFitError result(int64_t points) const {
    return {max_abs, ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2), points};
  }
};

std::vector<float> every(const std::vector<float>& v, int64_t width, int64_t stride) {
  std::vector<float> out;
  for (size_t r = 0; r * width < v.size(); r += stride)
    out.insert(out.end(), v.begin() + r * width, v.begin() + (r + 1) * width);
  return out;
}

}  // namespace

PruneAdalnReport prune_adaln(const std::string& in_path, const std::string& out_path,
                             const PruneAdalnOptions& o) {
  const SafetensorsFile f = SafetensorsFile::open(in_path);
  const H3Config c = infer_config(f);
  H3RT_CHECK(!c.adaln_curve(), in_path, ": already a curve-form AdaLN checkpoint (adaln_t_table ",
             c.adaln_curve_grid, " x ", c.adaln_curve_rank, ")");
  const int64_t D = c.time_embed_dim, G = o.grid, K = o.rank;
  H3RT_CHECK(G >= 2, "prune-adaln: --grid must be >= 2, got ", G);
  H3RT_CHECK(K >= 1 && (K >= D + 1 || K <= std::min(D, G)), "prune-adaln: --rank ", K,
             " must be in [1, min(time_embed_dim ", D, ", grid ", G, ")] or >= time_embed_dim + 1");
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  PruneAdalnReport rep;
  rep.exact_basis = K >= D + 1;
  const int64_t R = rep.exact_basis ? D + 1 : K;  // the table's rank

  // The curve on the grid, and the table.
  std::vector<float> t(G);
  for (int64_t i = 0; i < G; ++i) t[i] = static_cast<float>(double(i) / double(G - 1));
  const std::vector<float> g = curve_at(f, c, t);
  std::vector<float> table(G * R);
  std::vector<double> mu(D, 0.0);
  Mat V;  // [D, R] (PCA)
  if (rep.exact_basis) {
    for (int64_t i = 0; i < G; ++i) {
      std::copy_n(g.begin() + i * D, D, table.begin() + i * R);
      table[i * R + D] = 1.0f;
    }
  } else {
    for (int64_t i = 0; i < G; ++i)
      for (int64_t j = 0; j < D; ++j) mu[j] += g[i * D + j] / double(G);
    Mat C(G * D);
    for (int64_t i = 0; i < G; ++i)
      for (int64_t j = 0; j < D; ++j) C[i * D + j] = g[i * D + j] - mu[j];
    rep.energy_retained = principal_directions(C, G, D, K, V);
    for (int64_t i = 0; i < G; ++i)
      for (int64_t r = 0; r < R; ++r) {
        double s = 0;
        for (int64_t j = 0; j < D; ++j) s += C[i * D + j] * V[j * R + r];
        table[i * R + r] = static_cast<float>(s);
      }
  }
  say(rep.exact_basis ? detail::concat("basis: exact [silu(time_embedder(t)), 1], rank ", R)
                      : detail::concat("basis: rank ", R, " PCA of the ", G,
                                       "-point curve, energy retained ", rep.energy_retained));

  // Checked timesteps: grid nodes and the midpoints after them, thinned for large models.
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.layers; ++i)
    names.push_back("blocks." + std::to_string(i) + ".adaln_proj.linear");
  names.push_back("final_layer.adaln_proj.linear");
  const double outs = double(c.layers) * 18 * c.hidden + 2.0 * c.hidden;
  constexpr double kBudget = 2e10;  // multiply-adds of the full model's side of the check
  if (outs * D * (2 * G - 1) > kBudget) rep.node_stride = std::max<int64_t>(1, (G - 1 + 127) / 128);
  std::vector<float> t_nodes, t_mid;
  for (int64_t i = 0; i < G; i += rep.node_stride) {
    t_nodes.push_back(t[i]);
    if (i + 1 < G) t_mid.push_back(static_cast<float>((double(i) + 0.5) / double(G - 1)));
  }
  const double work = outs * D * double(t_nodes.size() + t_mid.size());
  rep.row_stride = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(work / kBudget)));
  const int64_t Pn = static_cast<int64_t>(t_nodes.size()), Pm = static_cast<int64_t>(t_mid.size());
  const std::vector<float> g_nodes = curve_at(f, c, t_nodes), g_mid = curve_at(f, c, t_mid);
  auto embed = [&](const std::vector<float>& ts) {
    std::vector<float> e(ts.size() * R);
    ops::adaln_curve_embed_cpu({table.data(), ts.data(), e.data(), G, R, int64_t(ts.size())});
    return e;
  };
  const std::vector<float> e_nodes = embed(t_nodes), e_mid = embed(t_mid);

  // Per layer: W' and b', then its outputs against the full layer's.
  std::map<std::string, NamedTensors> replaced;
  ErrorSums err_nodes, err_mid;
  for (size_t li = 0; li < names.size(); ++li) {
    const Layer L = read_layer(f, names[li], D);
    std::vector<float> w2(L.out * R), b2(L.out, 0.0f);
    for (int64_t o = 0; o < L.out; ++o) {
      const float* w = L.w.data() + o * D;
      if (rep.exact_basis) {
        std::copy_n(w, D, w2.begin() + o * R);
        w2[o * R + D] = L.b[o];
        continue;
      }
      double bias = L.b[o];
      for (int64_t j = 0; j < D; ++j) bias += double(w[j]) * mu[j];
      b2[o] = static_cast<float>(bias);
      for (int64_t r = 0; r < R; ++r) {
        double s = 0;
        for (int64_t j = 0; j < D; ++j) s += double(w[j]) * V[j * R + r];
        w2[o * R + r] = static_cast<float>(s);
      }
    }
    const int64_t rows = (L.out + rep.row_stride - 1) / rep.row_stride;
    const std::vector<float> ws = every(L.w, D, rep.row_stride), bs = every(L.b, 1, rep.row_stride);
    const std::vector<float> w2s = every(w2, R, rep.row_stride), b2s = every(b2, 1, rep.row_stride);
    err_nodes.add(linear(e_nodes, Pn, w2s, b2s, R, rows), linear(g_nodes, Pn, ws, bs, D, rows));
    err_mid.add(linear(e_mid, Pm, w2s, b2s, R, rows), linear(g_mid, Pm, ws, bs, D, rows));
    replaced[L.name + ".weight"] = {{L.name + ".weight", tensor_from_f32(w2, {L.out, R})},
                                    {L.name + ".bias", tensor_from_f32(b2, {L.out})}};
    if ((li + 1) % 10 == 0 || li + 1 == names.size())
      say(detail::concat("[", li + 1, "/", names.size(), "] ", L.name, " [", L.out, ", ", D,
                         "] -> [", L.out, ", ", R, "]"));
  }
  rep.nodes = err_nodes.result(Pn);
  rep.midpoints = err_mid.result(Pm);

  // Every other tensor as stored; the table where the time embedder was.
  NamedTensors out;
  for (const auto& e : f.entries()) {
    if (e.name == "time_embedder.proj_in.weight")
      out.emplace_back("adaln_t_table", tensor_from_f32(table, {G, R}));
    if (e.name.rfind("time_embedder.", 0) == 0) continue;
    if (auto r = replaced.find(e.name); r != replaced.end()) {
      out.insert(out.end(), r->second.begin(), r->second.end());
      continue;
    }
    if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0 &&
        replaced.count(e.name.substr(0, e.name.size() - 5) + ".weight"))
      continue;
    out.emplace_back(e.name, f.get(e.name));
  }
  std::map<std::string, std::string> meta = f.metadata();
  meta["h3rt_prune_adaln"] =
      detail::concat("grid ", G, " rank ", R, rep.exact_basis ? " exact basis" : " pca");
  write_safetensors(out_path, out, meta);
  return rep;
}

}  // namespace h3rt
