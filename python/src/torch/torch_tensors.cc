#include "torch_tensors.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

#include "chorus/error.h"
#include "torch_streams.h"

namespace chorus::torch_backend {
namespace {

void checkDense(const at::Tensor& tensor, std::string_view what, std::string_view op) {
  TORCH_CHECK(tensor.defined(), "chorus: ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(tensor.layout() == at::kStrided, "chorus: ", op, ": ", what, " is ", tensor.layout(),
              "; the chorus backend takes dense (strided) tensors only");
  TORCH_CHECK(tensor.device().is_cpu() || (tensor.is_cuda() && cudaTensorsSupported()),
              "chorus: ", op, ": ", what, " is on ", tensor.device(),
              "; the chorus torch.distributed backend takes CPU tensors",
              cudaTensorsSupported() ? " and CUDA tensors"
                                     : " (and CUDA tensors when built against torch >= 2.3)");
}

Device chorusDevice(const at::Tensor& tensor) {
  return tensor.is_cuda() ? Device::cuda(tensor.device().index()) : Device::cpu();
}

std::span<const int64_t> span(c10::IntArrayRef values) { return {values.data(), values.size()}; }

}  // namespace

chorus::Tensor typed(const at::Tensor& tensor, std::string_view what, std::string_view op) {
  checkDense(tensor, what, op);
  DataType dtype;
  switch (tensor.scalar_type()) {
    case at::kHalf:
      dtype = DataType::kFloat16;
      break;
    case at::kBFloat16:
      dtype = DataType::kBFloat16;
      break;
    case at::kFloat:
      dtype = DataType::kFloat32;
      break;
    case at::kDouble:
      dtype = DataType::kFloat64;
      break;
    case at::kChar:
      dtype = DataType::kInt8;
      break;
    case at::kByte:
      dtype = DataType::kUInt8;
      break;
    case at::kInt:
      dtype = DataType::kInt32;
      break;
    case at::kLong:
      dtype = DataType::kInt64;
      break;
    case at::kBool:
      dtype = DataType::kBool;
      break;
    case at::kShort:
      dtype = DataType::kInt16;
      break;
    case at::kComplexFloat:
      dtype = DataType::kComplex64;
      break;
    case at::kComplexDouble:
      dtype = DataType::kComplex128;
      break;
#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 3)
    case at::kUInt16:
      dtype = DataType::kUInt16;
      break;
    case at::kUInt32:
      dtype = DataType::kUInt32;
      break;
    case at::kUInt64:
      dtype = DataType::kUInt64;
      break;
#endif
    default:
      TORCH_CHECK(false, "chorus: ", op, ": ", what, " has dtype ", dtypeName(tensor.scalar_type()),
                  ", which chorus does not reduce (it reduces float16, bfloat16, float32, "
                  "float64, int8, uint8, int16, uint16, int32, uint32, int64, uint64, bool, "
                  "complex64 and complex128)");
  }
  return chorus::Tensor(tensor.data_ptr(), dtype, span(tensor.sizes()), span(tensor.strides()),
                        chorusDevice(tensor));
}

chorus::Tensor bytes(const at::Tensor& tensor, std::string_view what, std::string_view op) {
  checkDense(tensor, what, op);
  TORCH_CHECK(tensor.is_contiguous(), "chorus: ", op, ": ", what,
              " is not contiguous; call .contiguous() first");
  const int64_t count = static_cast<int64_t>(tensor.nbytes());
  return chorus::Tensor(tensor.data_ptr(), DataType::kUInt8, {count}, chorusDevice(tensor));
}

void checkSameDevice(const at::Tensor& tensor,
                     const at::Tensor& like,
                     std::string_view what,
                     std::string_view op) {
  TORCH_CHECK(tensor.device() == like.device(), "chorus: ", op, ": ", what, " is on ",
              tensor.device(), " but the operation's tensors are on ", like.device(),
              "; one call takes tensors of one device");
}

chorus::ReduceOp toChorus(const c10d::ReduceOp& op, std::string_view opName) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      return ReduceOp::kBand;
    case c10d::ReduceOp::BOR:
      return ReduceOp::kBor;
    case c10d::ReduceOp::BXOR:
      return ReduceOp::kBxor;
    default:
      TORCH_CHECK(false, "chorus: ", opName, ": reduce op ", static_cast<int>(op.op_),
                  " (PREMUL_SUM) is not supported; chorus supports SUM, AVG, PRODUCT, MIN, "
                  "MAX, BAND, BOR and BXOR");
  }
}

// torch's Python name of a dtype. Written out here: torch::utils::getDtypeNames is not exported
// by torch 2's libtorch_python (an undefined symbol at import), and c10's names are the C++ ones.
std::string dtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kByte:
      return "torch.uint8";
    case at::kChar:
      return "torch.int8";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kBool:
      return "torch.bool";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kComplexHalf:
      return "torch.complex32";
    default: {  // the rest by c10's name, lowercased as torch's are (float8_e4m3fn, uint16, ...)
      std::string name = c10::toString(type);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return "torch." + name;
    }
  }
}

void throwTorchError(const std::string& message) {
#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 1)
  C10_THROW_ERROR(DistBackendError, message);
#else
  throw std::runtime_error(message);
#endif
}

void rethrowAsTorchError() {
  try {
    throw;
  } catch (const c10::Error&) {
    throw;  // already torch's (our own argument checks)
  } catch (const std::exception& error) {
    throwTorchError(error.what());
  }
}

void checkListLength(size_t length, int size, const char* what, const char* op) {
  TORCH_CHECK(static_cast<int>(length) == size, "chorus: ", op, ": ", what, " holds ", length,
              " tensors; it must hold one per rank of the group (", size, ")");
}

at::Tensor asBytes(const at::Tensor& tensor) {
  // The values as they read (a lazy conjugate or negation applied), then their bytes.
  at::Tensor flat = tensor.resolve_conj().resolve_neg().contiguous().reshape({-1});
  return flat.scalar_type() == at::kByte ? flat : flat.view(at::kByte);
}

void copyBytesInto(const at::Tensor& to, at::Tensor from) {
  if (from.storage_offset() % to.element_size() != 0)
    from = from.clone();  // viewing bytes as a wider dtype needs them aligned to it
  to.copy_(from.view(to.scalar_type()).view(to.sizes()));
}

at::Tensor packed(const std::vector<at::Tensor>& tensors, int64_t stride, const at::Tensor& where) {
  at::Tensor buffer =
      at::zeros({stride * static_cast<int64_t>(tensors.size())}, where.options().dtype(at::kByte));
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor piece = asBytes(tensors[i]);
    buffer.narrow(0, static_cast<int64_t>(i) * stride, piece.numel()).copy_(piece);
  }
  return buffer;
}

at::Tensor byteBuffer(int64_t bytes, const at::Tensor& where) {
  return at::empty({bytes}, where.options().dtype(at::kByte));
}

}  // namespace chorus::torch_backend
