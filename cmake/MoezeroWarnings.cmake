# Warnings for our own targets: moezero_warnings(target)
function(moezero_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
endfunction()
