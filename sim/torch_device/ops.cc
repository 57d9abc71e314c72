// nrtsim_torch's PyTorch side: the simulated Neuron device registered on PyTorch 1.13's
// PrivateUse1 dispatch key ('privateuseone'): its device guard and caching allocator, the
// tensor factories, views and copies, and the aten ops it runs on the device, each compiled on
// first use (per shapes, dtypes and constants) into a model of the simulator's format and
// executed there (device.h). An op it does not implement reaches the boxed fallback below and
// raises NotImplementedError naming the op. Also the fused custom op nrtsim::rms_norm.
// What runs where is in README.md ("Ops").
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/torch_device/device.h"

namespace nrtsim_torch {
namespace {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// Runs `f`, turning the device's errors into PyTorch's (RuntimeError in Python).
template <typename F>
auto Guarded(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const DeviceError& e) {
    TORCH_CHECK(false, e.what());
  }
}

// ---- device guard: one device, no streams ------------------------------------------------

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device) const override { return {kDevice, 0}; }
  c10::Device getDevice() const override { return {kDevice, 0}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0,
                "nrtsim_torch: the simulated Neuron device has one device, 0; "
                "there is no ",
                d);
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// ---- the caching allocator --------------------------------------------------------------

// A storage's device memory. The DataPtr's address is this object's: unique per storage, never
// dereferenced (device memory is reached through the runtime only).
struct DeviceBuffer {
  nrt_tensor_t* tensor;
  size_t bytes;
};

void FreeBuffer(void* ctx) {
  auto* b = static_cast<DeviceBuffer*>(ctx);
  Release(b->tensor, b->bytes);
  delete b;
}

struct DeviceAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return {nullptr, nullptr, &FreeNothing, c10::Device(kDevice, 0)};
    auto* b = Guarded([&] { return new DeviceBuffer{Allocate(n), n}; });
    return {b, b, &FreeBuffer, c10::Device(kDevice, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  static void FreeNothing(void*) {}
};
DeviceAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---- tensors and their device memory ----------------------------------------------------

void CheckDtype(c10::ScalarType t, const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kBFloat16, "nrtsim_torch: ", what,
                              ": dtype ", t,
                              " is not supported on the simulated Neuron device "
                              "(float32 and bfloat16 only)");
}

bool OnDevice(const at::Tensor& t) { return t.device().type() == kDevice; }

// The device bytes of a tensor's elements, which must be contiguous.
Region RegionOf(const at::Tensor& t) {
  Region r;
  const auto* b = static_cast<const DeviceBuffer*>(t.storage().data_ptr().get_context());
  if (b == nullptr) return r;  // no elements
  r.tensor = b->tensor;
  r.tensor_bytes = b->bytes;
  r.offset = static_cast<size_t>(t.storage_offset()) * t.element_size();
  r.bytes = static_cast<size_t>(t.numel()) * t.element_size();
  return r;
}

// The whole storage of a device tensor.
Region StorageRegion(const at::Tensor& t) {
  Region r;
  const auto* b = static_cast<const DeviceBuffer*>(t.storage().data_ptr().get_context());
  if (b == nullptr) return r;
  r.tensor = b->tensor;
  r.tensor_bytes = r.bytes = b->bytes;
  return r;
}

at::Tensor Empty(at::IntArrayRef sizes, c10::ScalarType dtype) {
  return at::detail::empty_generic(
      sizes, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, c10::nullopt);
}

// A device tensor's values on the host, contiguous, same dtype. A strided view is read whole
// (its storage) and laid out on the host: the "through the host" path of README.md.
at::Tensor ToHost(const at::Tensor& src) {
  if (src.is_contiguous()) {
    at::Tensor host = at::empty(src.sizes(), at::TensorOptions().dtype(src.scalar_type()));
    if (src.numel() > 0) Guarded([&] { Read(RegionOf(src), host.data_ptr()); });
    return host;
  }
  const Region whole = StorageRegion(src);
  const int64_t elements = static_cast<int64_t>(whole.bytes / src.element_size());
  at::Tensor storage = at::empty({elements}, at::TensorOptions().dtype(src.scalar_type()));
  if (elements > 0) Guarded([&] { Read(whole, storage.data_ptr()); });
  return storage.as_strided(src.sizes(), src.strides(), src.storage_offset()).contiguous();
}

// Writes host values (any dtype, any layout) into a device tensor (any layout).
void FromHost(const at::Tensor& host, const at::Tensor& dst) {
  at::Tensor values = host.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  if (dst.is_contiguous()) {
    if (dst.numel() > 0) Guarded([&] { Write(RegionOf(dst), values.data_ptr()); });
    return;
  }
  // A strided destination: read its storage, write the view's elements, write it back.
  const Region whole = StorageRegion(dst);
  const int64_t elements = static_cast<int64_t>(whole.bytes / dst.element_size());
  at::Tensor storage = at::empty({elements}, at::TensorOptions().dtype(dst.scalar_type()));
  Guarded([&] { Read(whole, storage.data_ptr()); });
  storage.as_strided(dst.sizes(), dst.strides(), dst.storage_offset()).copy_(values);
  Guarded([&] { Write(whole, storage.data_ptr()); });
}

// ---- models ------------------------------------------------------------------------------

const char* DtypeName(c10::ScalarType t) { return t == at::kBFloat16 ? "bf16" : "fp32"; }

std::string Dims(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string Number(double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// One op's model, written in the text form: inputs a, b, c..., one output `out`, the op's
// statements. The last statement assigns `out`.
class ModelBuilder {
 public:
  explicit ModelBuilder(std::string name) : name_(std::move(name)) {}

  // Declares a model input for a device tensor (contiguous) and binds it; returns its name.
  std::string Input(const at::Tensor& t) { return InputShaped(t, t.sizes()); }
  // The same, declared with `sizes` (same elements, e.g. broadcast dims as 1).
  std::string InputShaped(const at::Tensor& t, at::IntArrayRef sizes) {
    const std::string name(1, static_cast<char>('a' + inputs_.size()));
    decls_ += "input " + name + " " + DtypeName(t.scalar_type()) + " " + Dims(sizes) + "\n";
    inputs_.push_back({name, RegionOf(t)});
    return name;
  }
  void Output(const at::Tensor& t) {
    decls_ +=
        std::string("output out ") + DtypeName(t.scalar_type()) + " " + Dims(t.sizes()) + "\n";
    outputs_.push_back({"out", RegionOf(t)});
  }
  // `target = expr`; returns target. The caller names the last one "out".
  std::string Op(const std::string& expr, std::string target = "") {
    if (target.empty()) target = "t" + std::to_string(temps_++);
    ops_ += target + " = " + expr + "\n";
    return target;
  }
  void Run(const char* what) {
    const std::string text = "model " + name_ + "\n" + decls_ + ops_;
    Guarded([&] {
      nrt_model_t* model = Model(text);
      Execute(model, inputs_, outputs_, what);
    });
  }

 private:
  std::string name_, decls_, ops_;
  std::vector<Binding> inputs_, outputs_;
  int temps_ = 0;
};

// A contiguous device operand. A broadcast view (expand: stride 0 over some dims) of a
// contiguous tensor is passed as that tensor, its broadcast dims declared 1, so the model
// broadcasts it; any other strided view is made contiguous: a transposed matrix by a transpose
// model on the device (CopyFrom), anything else through the host.
struct Operand {
  at::Tensor tensor;
  std::vector<int64_t> sizes;
};

Operand DeviceOperand(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, t.sizes().vec()};
  std::vector<int64_t> sizes = t.sizes().vec(), strides = t.strides().vec();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (strides[d] == 0) sizes[d] = 1;
  }
  at::Tensor base = t.as_strided(sizes, strides, t.storage_offset());
  if (base.is_contiguous()) return {base, sizes};
  return {t.contiguous(), t.sizes().vec()};
}

void CheckOnDevice(const at::Tensor& t, const char* op) {
  TORCH_CHECK(OnDevice(t), "nrtsim_torch: ", op,
              ": expected a tensor on the simulated Neuron "
              "device (privateuseone), got one on ",
              t.device());
  CheckDtype(t.scalar_type(), op);
}

// A CPU scalar operand (a Python number, wrapped; or a 0-dim CPU tensor) made a device tensor
// of one float32, copied host-to-device now, as eager PyTorch on a device does.
at::Tensor ScalarToDevice(const at::Tensor& cpu) {
  at::Tensor host = cpu.to(at::kFloat).reshape({});
  at::Tensor dev = Empty({}, at::kFloat);
  Guarded([&] { Write(RegionOf(dev), host.data_ptr()); });
  return dev;
}

bool IsCpuScalar(const at::Tensor& t) { return !OnDevice(t) && t.dim() == 0; }

// a OP b (mul, add, sub, div), broadcasting; b scaled by alpha first when alpha != 1.
at::Tensor Binary(const char* aten, const char* op, const at::Tensor& a_in, const at::Tensor& b_in,
                  const c10::Scalar& alpha = 1) {
  const c10::ScalarType dtype = at::result_type(a_in, b_in);
  CheckDtype(dtype, aten);
  at::Tensor a = a_in, b = b_in;
  if (IsCpuScalar(a)) a = ScalarToDevice(a);
  if (IsCpuScalar(b)) b = ScalarToDevice(b);
  CheckOnDevice(a, aten);
  CheckOnDevice(b, aten);
  at::Tensor out = Empty(at::infer_size(a.sizes(), b.sizes()), dtype);
  if (out.numel() == 0) return out;
  const Operand oa = DeviceOperand(a), ob = DeviceOperand(b);
  ModelBuilder m(std::string("aten_") + op);
  const std::string na = m.InputShaped(oa.tensor, oa.sizes);
  std::string nb = m.InputShaped(ob.tensor, ob.sizes);
  m.Output(out);
  if (alpha.toDouble() != 1.0)
    nb = m.Op("mul_scalar(" + nb + ", " + Number(alpha.toDouble()) + ")");
  m.Op(std::string(op) + "(" + na + ", " + nb + ")", "out");
  m.Run(aten);
  return out;
}

// a * s + t with Scalar s, t (the scalar ops, constants of the model).
at::Tensor Affine(const char* aten, const at::Tensor& a, double scale, double shift) {
  CheckOnDevice(a, aten);
  at::Tensor out = Empty(a.sizes(), a.scalar_type());
  if (out.numel() == 0) return out;
  ModelBuilder m(scale != 1.0 ? "aten_mul_scalar" : "aten_add_scalar");
  std::string x = m.Input(a.contiguous());
  m.Output(out);
  if (scale != 1.0 && shift != 0.0) x = m.Op("mul_scalar(" + x + ", " + Number(scale) + ")");
  if (shift != 0.0) {
    m.Op("add_scalar(" + x + ", " + Number(shift) + ")", "out");
  } else {
    m.Op("mul_scalar(" + x + ", " + Number(scale) + ")", "out");
  }
  m.Run(aten);
  return out;
}

at::Tensor& InPlace(at::Tensor& self, const at::Tensor& result) {
  TORCH_CHECK(result.sizes() == self.sizes(), "nrtsim_torch: in-place result of shape ",
              result.sizes(), " does not fit a tensor of shape ", self.sizes());
  self.copy_(result);
  return self;
}

// ---- factories, views, copies ------------------------------------------------------------

at::Tensor EmptyMemoryFormat(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                             c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                             c10::optional<bool> pin_memory,
                             c10::optional<at::MemoryFormat> memory_format) {
  const c10::ScalarType t = dtype.value_or(at::get_default_dtype_as_scalartype());
  CheckDtype(t, "aten::empty.memory_format");
  return at::detail::empty_generic(
      size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t, memory_format);
}

at::Tensor EmptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                        c10::optional<at::Device> device, c10::optional<bool> pin_memory) {
  const c10::ScalarType t = dtype.value_or(at::get_default_dtype_as_scalartype());
  CheckDtype(t, "aten::empty_strided");
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t);
}

const at::Tensor& Resize(const at::Tensor& self, at::IntArrayRef size,
                         c10::optional<at::MemoryFormat> memory_format) {
  int64_t numel = 1;
  for (int64_t d : size) numel *= d;
  const size_t need = (static_cast<size_t>(numel) + self.storage_offset()) * self.element_size();
  if (need > self.storage().nbytes()) {
    TORCH_CHECK_NOT_IMPLEMENTED(self.numel() == 0,
                                "nrtsim_torch: aten::resize_ that grows a "
                                "tensor with elements is not implemented");
    at::Tensor fresh = Empty(size, self.scalar_type());
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(fresh.storage());
    self.unsafeGetTensorImpl()->set_storage_offset(0);
  }
  self.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  return self;
}

// A 2-D view that is the transpose of a contiguous matrix (t.t() is contiguous) and is not
// contiguous itself.
bool IsTransposed(const at::Tensor& t) {
  return t.dim() == 2 && !t.is_contiguous() && t.t().is_contiguous();
}

// dst <- src where one or both are on the device.
at::Tensor CopyFrom(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  if (!OnDevice(src)) {  // host -> device
    CheckDtype(dst.scalar_type(), "aten::copy_");
    FromHost(src, dst);
    return dst;
  }
  if (!OnDevice(dst)) {  // device -> host
    at::Tensor host = ToHost(src);
    if (dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
        dst.sizes() == src.sizes()) {
      std::memcpy(dst.data_ptr(), host.data_ptr(), host.nbytes());
    } else {
      dst.copy_(host);
    }
    return dst;
  }
  // device -> device
  if (src.sizes() == dst.sizes() && IsTransposed(src) && dst.is_contiguous()) {
    // A transposed matrix made contiguous (linear's w.t(), addmm's backward): one transpose
    // model from the matrix it views, rounding to dst's dtype as copy does.
    ModelBuilder m("aten_transpose");
    const std::string a = m.Input(src.t());
    m.Output(dst);
    m.Op("transpose(" + a + ")", "out");
    m.Run("aten::copy_");
    return dst;
  }
  if (src.sizes() == dst.sizes() && IsTransposed(src) && IsTransposed(dst)) {
    return CopyFrom(src.t(), dst.t(), non_blocking).t();  // .to(dtype) of a transpose keeps it
  }
  if (src.sizes() == dst.sizes() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.scalar_type() == dst.scalar_type()) {
      Guarded([&] { CopyOnDevice(RegionOf(src), RegionOf(dst)); });
      return dst;
    }
    ModelBuilder m("aten_to_copy");  // a dtype conversion: the copy op rounds to dst's dtype
    const std::string a = m.Input(src);
    m.Output(dst);
    m.Op("copy(" + a + ")", "out");
    m.Run("aten::copy_");
    return dst;
  }
  FromHost(ToHost(src), dst);  // a strided view on either side, or broadcasting: through the host
  return dst;
}

at::Tensor& Copy(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  CopyFrom(src, self, non_blocking);
  return self;
}

at::Tensor CopyFromAndResize(const at::Tensor& src, const at::Tensor& dst) {
  Resize(dst, src.sizes(), c10::nullopt);
  return CopyFrom(src, dst, false);
}

at::Tensor& Fill(at::Tensor& self, const c10::Scalar& value) {
  CheckDtype(self.scalar_type(), "aten::fill_");
  FromHost(at::scalar_tensor(value, at::TensorOptions().dtype(self.scalar_type())), self);
  return self;
}

at::Tensor& Zero(at::Tensor& self) { return Fill(self, 0); }

// ---- the ops -----------------------------------------------------------------------------

at::Tensor Mul(const at::Tensor& a, const at::Tensor& b) {
  return Binary("aten::mul", "mul", a, b);
}
at::Tensor Div(const at::Tensor& a, const at::Tensor& b) {
  return Binary("aten::div", "div", a, b);
}
at::Tensor Add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary("aten::add", "add", a, b, alpha);
}
at::Tensor Sub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary("aten::sub", "sub", a, b, alpha);
}
at::Tensor MulScalar(const at::Tensor& a, const c10::Scalar& s) {
  return Affine("aten::mul", a, s.toDouble(), 0.0);
}
at::Tensor DivScalar(const at::Tensor& a, const c10::Scalar& s) {
  TORCH_CHECK_NOT_IMPLEMENTED(s.toDouble() != 0.0,
                              "nrtsim_torch: aten::div.Scalar by zero "
                              "is not implemented");
  return Affine("aten::div", a, 1.0 / s.toDouble(), 0.0);
}
at::Tensor AddScalar(const at::Tensor& a, const c10::Scalar& s, const c10::Scalar& alpha) {
  return Affine("aten::add", a, 1.0, s.toDouble() * alpha.toDouble());
}
at::Tensor SubScalar(const at::Tensor& a, const c10::Scalar& s, const c10::Scalar& alpha) {
  return Affine("aten::sub", a, 1.0, -s.toDouble() * alpha.toDouble());
}
at::Tensor& MulInPlace(at::Tensor& self, const at::Tensor& b) {
  return InPlace(self, Mul(self, b));
}
at::Tensor& DivInPlace(at::Tensor& self, const at::Tensor& b) {
  return InPlace(self, Div(self, b));
}
at::Tensor& AddInPlace(at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha) {
  return InPlace(self, Add(self, b, alpha));
}
at::Tensor& SubInPlace(at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha) {
  return InPlace(self, Sub(self, b, alpha));
}
at::Tensor& MulScalarInPlace(at::Tensor& self, const c10::Scalar& s) {
  return InPlace(self, MulScalar(self, s));
}
at::Tensor& DivScalarInPlace(at::Tensor& self, const c10::Scalar& s) {
  return InPlace(self, DivScalar(self, s));
}
at::Tensor& AddScalarInPlace(at::Tensor& self, const c10::Scalar& s, const c10::Scalar& alpha) {
  return InPlace(self, AddScalar(self, s, alpha));
}
at::Tensor& SubScalarInPlace(at::Tensor& self, const c10::Scalar& s, const c10::Scalar& alpha) {
  return InPlace(self, SubScalar(self, s, alpha));
}

// One-input ops: out = f(a), f a chain of the library's ops.
at::Tensor Unary(const char* aten, const char* model_name, const at::Tensor& a,
                 const std::vector<std::string>& chain) {
  CheckOnDevice(a, aten);
  at::Tensor out = Empty(a.sizes(), a.scalar_type());
  if (out.numel() == 0) return out;
  ModelBuilder m(model_name);
  std::string x = m.Input(a.contiguous());
  m.Output(out);
  for (size_t i = 0; i < chain.size(); ++i) {
    std::string expr = chain[i];
    const size_t at = expr.find('$');
    expr.replace(at, 1, x);
    x = m.Op(expr, i + 1 == chain.size() ? "out" : "");
  }
  m.Run(aten);
  return out;
}

at::Tensor Rsqrt(const at::Tensor& a) {
  return Unary("aten::rsqrt", "aten_rsqrt", a, {"rsqrt($)"});
}

// x ** n for whole n from 1 to 8 (n = 2 is mul(x, x), as the seed's eager RMSNorm runs it).
at::Tensor Pow(const at::Tensor& a, const c10::Scalar& exponent) {
  CheckOnDevice(a, "aten::pow");
  const double e = exponent.toDouble();
  TORCH_CHECK_NOT_IMPLEMENTED(e == std::floor(e) && e >= 1 && e <= 8,
                              "nrtsim_torch: "
                              "aten::pow.Tensor_Scalar with exponent ",
                              e,
                              " is not implemented "
                              "on the simulated Neuron device (whole exponents 1 to 8 only)");
  at::Tensor out = Empty(a.sizes(), a.scalar_type());
  if (out.numel() == 0) return out;
  const at::Tensor c = a.contiguous();
  ModelBuilder m("aten_pow");
  const int n = static_cast<int>(e);
  const std::string x = m.Input(c);
  m.Output(out);
  if (n == 1) {
    m.Op("copy(" + x + ")", "out");
  } else {
    const std::string x2 = m.Input(c);  // the same tensor twice, as a lone mul(x, x) reads it
    std::string acc = x;
    for (int k = 2; k <= n; ++k) acc = m.Op("mul(" + acc + ", " + x2 + ")", k == n ? "out" : "");
  }
  m.Run("aten::pow");
  return out;
}

// The reduced dims of a reduction, sorted, wrapped, deduplicated; all dims when none given.
std::vector<int64_t> ReducedDims(const at::Tensor& a, at::OptionalIntArrayRef dims) {
  std::vector<int64_t> out;
  if (!dims.has_value() || dims->empty()) {
    for (int64_t d = 0; d < a.dim(); ++d) out.push_back(d);
  } else {
    for (int64_t d : *dims) out.push_back(c10::maybe_wrap_dim(d, a.dim()));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// mean (or sum: the mean times the count) over dims, keeping them or not.
at::Tensor Reduce(const char* aten, bool sum, const at::Tensor& a, at::OptionalIntArrayRef dims,
                  bool keepdim, c10::optional<at::ScalarType> dtype) {
  CheckOnDevice(a, aten);
  const c10::ScalarType t = dtype.value_or(a.scalar_type());
  CheckDtype(t, aten);
  const std::vector<int64_t> reduced = ReducedDims(a, dims);
  std::vector<int64_t> kept = a.sizes().vec(), dropped;
  double count = 1;
  for (int64_t d : reduced) {
    count *= kept[d];
    kept[d] = 1;
  }
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) dropped.push_back(kept[d]);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(a.numel() > 0, "nrtsim_torch: ", aten,
                              " of an empty tensor is "
                              "not implemented");
  at::Tensor out = Empty(kept, t);
  if (a.dim() == 0 || reduced.empty()) {  // nothing to reduce: a copy
    out.copy_(a.reshape(kept));
  } else {
    ModelBuilder m(sum ? "aten_sum" : "aten_mean");
    std::string x = m.Input(a.contiguous());
    m.Output(out);
    for (size_t i = 0; i < reduced.size(); ++i) {
      const bool last = i + 1 == reduced.size() && !sum;
      x = m.Op("mean(" + x + ", axis=" + std::to_string(reduced[i]) + ")", last ? "out" : "");
    }
    if (sum) m.Op("mul_scalar(" + x + ", " + Number(count) + ")", "out");
    m.Run(aten);
  }
  return keepdim ? out : out.view(dropped);
}

at::Tensor MeanDim(const at::Tensor& a, at::OptionalIntArrayRef dims, bool keepdim,
                   c10::optional<at::ScalarType> dtype) {
  return Reduce("aten::mean", false, a, dims, keepdim, dtype);
}
at::Tensor SumDim(const at::Tensor& a, at::OptionalIntArrayRef dims, bool keepdim,
                  c10::optional<at::ScalarType> dtype) {
  return Reduce("aten::sum", true, a, dims, keepdim, dtype);
}
at::Tensor SumAll(const at::Tensor& a, c10::optional<at::ScalarType> dtype) {
  return Reduce("aten::sum", true, a, c10::nullopt, false, dtype);
}

// out = alpha * (a @ b) + beta * bias
at::Tensor MatmulOp(const char* aten, const at::Tensor* bias, const at::Tensor& a,
                    const at::Tensor& b, double beta, double alpha) {
  CheckOnDevice(a, aten);
  CheckOnDevice(b, aten);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "nrtsim_torch: ", aten,
              ": shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "nrtsim_torch: ", aten,
              ": expected both "
              "matrices of one dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  at::Tensor out = Empty({a.size(0), b.size(1)}, a.scalar_type());
  if (out.numel() == 0) return out;
  TORCH_CHECK_NOT_IMPLEMENTED(a.size(1) > 0, "nrtsim_torch: ", aten,
                              " with an inner "
                              "dimension of 0 is not implemented");
  ModelBuilder m(bias != nullptr ? "aten_addmm" : "aten_mm");
  const bool use_bias = bias != nullptr && beta != 0.0;
  std::string nbias;
  if (use_bias) {
    CheckOnDevice(*bias, aten);
    const Operand ob = DeviceOperand(*bias);
    nbias = m.InputShaped(ob.tensor, ob.sizes);
  }
  const std::string na = m.Input(a.contiguous()), nb = m.Input(b.contiguous());
  m.Output(out);
  std::string x = m.Op("matmul(" + na + ", " + nb + ")", !use_bias && alpha == 1.0 ? "out" : "");
  if (alpha != 1.0) x = m.Op("mul_scalar(" + x + ", " + Number(alpha) + ")", use_bias ? "" : "out");
  if (use_bias) {
    if (beta != 1.0) nbias = m.Op("mul_scalar(" + nbias + ", " + Number(beta) + ")");
    m.Op("add(" + x + ", " + nbias + ")", "out");
  }
  m.Run(aten);
  return out;
}

at::Tensor Mm(const at::Tensor& a, const at::Tensor& b) {
  return MatmulOp("aten::mm", nullptr, a, b, 0.0, 1.0);
}
at::Tensor Addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  return MatmulOp("aten::addmm", &self, a, b, beta.toDouble(), alpha.toDouble());
}

at::Tensor Relu(const at::Tensor& a) { return Unary("aten::relu", "aten_relu", a, {"relu($)"}); }
at::Tensor& ReluInPlace(at::Tensor& self) { return InPlace(self, Relu(self)); }

at::Tensor Abs(const at::Tensor& a) { return Unary("aten::abs", "aten_abs", a, {"abs($)"}); }
at::Tensor& AbsInPlace(at::Tensor& self) { return InPlace(self, Abs(self)); }

// grad where self > threshold, else 0 (ReLU's backward: self is the ReLU's output, threshold 0).
at::Tensor ThresholdBackward(const at::Tensor& grad, const at::Tensor& self,
                             const c10::Scalar& threshold) {
  const char* aten = "aten::threshold_backward";
  CheckOnDevice(grad, aten);
  CheckOnDevice(self, aten);
  const c10::ScalarType dtype = at::result_type(grad, self);
  CheckDtype(dtype, aten);
  at::Tensor out = Empty(at::infer_size(grad.sizes(), self.sizes()), dtype);
  if (out.numel() == 0) return out;
  const Operand og = DeviceOperand(grad), os = DeviceOperand(self);
  ModelBuilder m("aten_threshold_backward");
  const std::string g = m.InputShaped(og.tensor, og.sizes), x = m.InputShaped(os.tensor, os.sizes);
  m.Output(out);
  m.Op("threshold_backward(" + g + ", " + x + ", " + Number(threshold.toDouble()) + ")", "out");
  m.Run(aten);
  return out;
}

// reduction: 0 none, 1 mean, 2 sum (at::Reduction).
at::Tensor MseLoss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  CheckOnDevice(self, "aten::mse_loss");
  CheckOnDevice(target, "aten::mse_loss");
  TORCH_CHECK(reduction >= 0 && reduction <= 2, "nrtsim_torch: aten::mse_loss: reduction ",
              reduction, " is not none (0), mean (1) or sum (2)");
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), target.sizes());
  const c10::ScalarType dtype = at::result_type(self, target);
  const std::vector<int64_t> kept(shape.size(), 1);
  at::Tensor out = Empty(reduction == 0 ? at::IntArrayRef(shape) : at::IntArrayRef(kept), dtype);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  TORCH_CHECK_NOT_IMPLEMENTED(count > 0,
                              "nrtsim_torch: aten::mse_loss of empty tensors is not "
                              "implemented");
  ModelBuilder m("aten_mse_loss");
  const Operand oa = DeviceOperand(self), ob = DeviceOperand(target);
  const std::string a = m.InputShaped(oa.tensor, oa.sizes), b = m.InputShaped(ob.tensor, ob.sizes);
  m.Output(out);
  const std::string d = m.Op("sub(" + a + ", " + b + ")");
  std::string x = m.Op("mul(" + d + ", " + d + ")", reduction == 0 || shape.empty() ? "out" : "");
  if (reduction != 0 && !shape.empty()) {
    for (size_t i = 0; i < shape.size(); ++i) {
      const bool last = i + 1 == shape.size() && reduction == 1;
      x = m.Op("mean(" + x + ", axis=" + std::to_string(i) + ")", last ? "out" : "");
    }
    if (reduction == 2) m.Op("mul_scalar(" + x + ", " + Number(double(count)) + ")", "out");
  }
  m.Run("aten::mse_loss");
  return reduction == 0 ? out
                        : out.view(std::vector<int64_t>{});  // not view({}): that is view(dtype)
}

// d/dself: grad * 2 * (self - target), divided by the count for the mean.
at::Tensor MseLossBackward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                           int64_t reduction) {
  for (const at::Tensor* t : {&grad, &self, &target}) CheckOnDevice(*t, "aten::mse_loss_backward");
  at::Tensor out = Empty(self.sizes(), self.scalar_type());
  if (out.numel() == 0) return out;
  const double scale = reduction == 1 ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  ModelBuilder m("aten_mse_loss_backward");
  const Operand og = DeviceOperand(grad), ot = DeviceOperand(target);
  const std::string a = m.Input(self.contiguous()), b = m.InputShaped(ot.tensor, ot.sizes),
                    g = m.InputShaped(og.tensor, og.sizes);
  m.Output(out);
  const std::string d = m.Op("sub(" + a + ", " + b + ")");
  const std::string dg = m.Op("mul(" + d + ", " + g + ")");
  m.Op("mul_scalar(" + dg + ", " + Number(scale) + ")", "out");
  m.Run("aten::mse_loss_backward");
  return out;
}

// tensor.item(): the one element, read back.
c10::Scalar LocalScalarDense(const at::Tensor& self) {
  CheckOnDevice(self, "aten::_local_scalar_dense");
  const at::Tensor host = ToHost(self).to(at::kFloat);
  return c10::Scalar(static_cast<double>(*host.data_ptr<float>()));
}

// ---- the fused custom op -----------------------------------------------------------------

// nrtsim::rms_norm(x, weight, eps): one execution of the library's rms_norm kernel, as the
// seed's fused variant runs it.
at::Tensor RmsNormDevice(const at::Tensor& x, const at::Tensor& weight, double eps) {
  CheckOnDevice(x, "nrtsim::rms_norm");
  CheckOnDevice(weight, "nrtsim::rms_norm");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "nrtsim_torch: nrtsim::rms_norm: the weight must be 1-D of the input's last "
              "dimension, got ",
              weight.sizes(), " for an input of ", x.sizes());
  at::Tensor out = Empty(x.sizes(), x.scalar_type());
  if (out.numel() == 0) return out;
  ModelBuilder m("aten_rms_norm");
  const std::string a = m.Input(x.contiguous()), w = m.Input(weight.contiguous());
  m.Output(out);
  m.Op("rms_norm(" + a + ", " + w + ", " + Number(eps) + ")", "out");
  m.Run("nrtsim::rms_norm");
  return out;
}

// The CPU reference: float32 throughout, rounded once, as the device kernel computes.
at::Tensor RmsNormCpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (xf * r * weight.to(at::kFloat)).to(x.scalar_type());
}

// Above autograd: the fused op has no backward, so it refuses inputs that need one rather than
// return a result autograd would silently treat as a constant.
at::Tensor RmsNormAutograd(c10::DispatchKeySet keys, const at::Tensor& x, const at::Tensor& weight,
                           double eps) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !at::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad()),
      "nrtsim_torch: nrtsim::rms_norm has no backward; call it under torch.no_grad() or on "
      "tensors that do not require grad");
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("nrtsim::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  // Redispatched below autograd: one RecordFunction (one range in a profile) per call.
  return op.redispatch(keys & c10::after_autograd_keyset, x, weight, eps);
}

// ---- everything else ---------------------------------------------------------------------

void NotImplemented(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "nrtsim_torch: ", op.schema().operator_name(),
                              " is not implemented on the simulated Neuron device "
                              "(privateuseone); sim/torch_device/README.md lists the ops that are");
}

}  // namespace
}  // namespace nrtsim_torch

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nrtsim_torch::NotImplemented>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace nrtsim_torch;
  m.impl("empty.memory_format", EmptyMemoryFormat);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", Resize);
  m.impl("copy_", Copy);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("fill_.Scalar", Fill);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("zero_", Zero);
  m.impl("mul.Tensor", Mul);
  m.impl("div.Tensor", Div);
  m.impl("add.Tensor", Add);
  m.impl("sub.Tensor", Sub);
  m.impl("mul.Scalar", MulScalar);
  m.impl("div.Scalar", DivScalar);
  m.impl("add.Scalar", AddScalar);
  m.impl("sub.Scalar", SubScalar);
  m.impl("mul_.Tensor", MulInPlace);
  m.impl("div_.Tensor", DivInPlace);
  m.impl("add_.Tensor", AddInPlace);
  m.impl("sub_.Tensor", SubInPlace);
  m.impl("mul_.Scalar", MulScalarInPlace);
  m.impl("div_.Scalar", DivScalarInPlace);
  m.impl("add_.Scalar", AddScalarInPlace);
  m.impl("sub_.Scalar", SubScalarInPlace);
  m.impl("rsqrt", Rsqrt);
  m.impl("pow.Tensor_Scalar", Pow);
  m.impl("mean.dim", MeanDim);
  m.impl("sum.dim_IntList", SumDim);
  m.impl("sum", SumAll);
  m.impl("mm", Mm);
  m.impl("addmm", Addmm);
  m.impl("relu", Relu);
  m.impl("relu_", ReluInPlace);
  m.impl("threshold_backward", ThresholdBackward);
  m.impl("abs", Abs);
  m.impl("abs_", AbsInPlace);
  m.impl("mse_loss", MseLoss);
  m.impl("mse_loss_backward", MseLossBackward);
}

TORCH_LIBRARY(nrtsim, m) { m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"); }

TORCH_LIBRARY_IMPL(nrtsim, PrivateUse1, m) { m.impl("rms_norm", nrtsim_torch::RmsNormDevice); }
TORCH_LIBRARY_IMPL(nrtsim, CPU, m) { m.impl("rms_norm", nrtsim_torch::RmsNormCpu); }
TORCH_LIBRARY_IMPL(nrtsim, AutogradPrivateUse1, m) {
  m.impl("rms_norm", nrtsim_torch::RmsNormAutograd);
}
