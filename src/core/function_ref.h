// FunctionRef<R(Args...)>: a non-owning reference to a callable, as C++26's std::function_ref.
//
// Contract:
//  - Making, copying and calling one allocates nothing (std::function allocates for captures of
//    more than two pointers): for bodies and steps called within one call on the hot path (the
//    runtime's blocking calls, the shm backend's chunk steps).
//  - It refers to the callable, which must outlive every call through it: pass lambdas to a
//    function taking a FunctionRef parameter, never store one made from a temporary.
//  - The callable (a lambda or other function object) is called as const. A default-made (or
//    nullptr) FunctionRef is empty: false in a boolean test, and must not be called.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace chorus::detail {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  FunctionRef() = default;
  FunctionRef(std::nullptr_t) {}  // NOLINT: implicit, as std::function's
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                        std::is_invocable_r_v<R, const F&, Args...>>>
  FunctionRef(const F& callable)  // NOLINT: implicit, so lambdas convert at the call
      : callable_(&callable), call_([](const void* f, Args... args) -> R {
          return (*static_cast<const F*>(f))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(callable_, std::forward<Args>(args)...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  const void* callable_ = nullptr;
  R (*call_)(const void*, Args...) = nullptr;
};

}  // namespace chorus::detail
