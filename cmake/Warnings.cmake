# Warnings as errors on our own code (third-party headers come from system paths).
function(trainer_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers
      # GCC 12 reports false -Wrestrict positives inside std::string (GCC bug 105329).
      -Wno-restrict>)
  if(TRAINER_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(TRAINER_SANITIZE)
    # GCC 12 reports false -Wmaybe-uninitialized inside std::regex under the sanitizers.
    target_compile_options(${target} PRIVATE -fsanitize=${TRAINER_SANITIZE} -fno-omit-frame-pointer
                                             -Wno-error=maybe-uninitialized)
    target_link_options(${target} PRIVATE -fsanitize=${TRAINER_SANITIZE})
  endif()
endfunction()
