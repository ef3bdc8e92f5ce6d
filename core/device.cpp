// core/device.cpp — device kind names (device.h holds the Device, Stream and Event interfaces).
#include "core/device.h"

namespace moezero {

const char* device_kind_name(DeviceKind k) { return k == DeviceKind::Cpu ? "cpu" : "cuda"; }

}  // namespace moezero
