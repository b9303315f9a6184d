# ember_stable_headers(SRC DST): mirror the headers under SRC into DST, rewriting a file only when its
# content changed. pip builds in a fresh isolated environment each time, so a dependency's include
# path changes with every `pip install`; compiling against this stable copy keeps the compile
# commands, and so the objects of the previous build, valid.
function(ember_stable_headers src dst)
  file(GLOB_RECURSE _headers RELATIVE "${src}" "${src}/*.h" "${src}/*.hpp")
  foreach(_h IN LISTS _headers)
    configure_file("${src}/${_h}" "${dst}/${_h}" COPYONLY)
  endforeach()
endfunction()
