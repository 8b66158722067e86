// Epilogue names and the activation layers they stand for (epilogue.h).
#include "ops/epilogue.h"

namespace trainer {

Epilogue epilogue_of(const Attrs& attrs) {
  if (!attrs.has("activation")) return Epilogue::none;
  const std::string& name = attrs.get_string("activation");
  if (name == "relu") return Epilogue::relu;
  if (name == "gelu") return Epilogue::gelu;
  if (name == "gelu_tanh") return Epilogue::gelu_tanh;
  return Epilogue::none;
}

const char* epilogue_name(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::relu:
      return "relu";
    case Epilogue::gelu:
      return "gelu";
    case Epilogue::gelu_tanh:
      return "gelu_tanh";
    case Epilogue::none:
      break;
  }
  return "none";
}

std::optional<Epilogue> epilogue_for_layer(const std::string& op, const Attrs& attrs) {
  if (op == "relu") return Epilogue::relu;
  if (op == "gelu") {
    const bool tanh = attrs.has("approximate") && attrs.get_string("approximate") == "tanh";
    return tanh ? Epilogue::gelu_tanh : Epilogue::gelu;
  }
  return std::nullopt;
}

}  // namespace trainer
