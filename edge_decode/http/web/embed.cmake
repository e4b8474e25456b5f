# Writes OUT, a C++ source holding the web page's files as raw string literals
# (see edge_decode/http/web_ui.h): every *.html, *.js and *.css file of DIR, sorted
# by name. Run at build time by edge_decode/CMakeLists.txt and by
# tests/fuzz/build.sh:
#   cmake -DOUT=web_assets.cc -DDIR=edge_decode/http/web -P edge_decode/http/web/embed.cmake
# A file's name under DIR becomes its URL path ("/" for index.html). The raw
# string delimiter must not occur in a file; it is checked here.
file(GLOB FILES RELATIVE "${DIR}" "${DIR}/*.html" "${DIR}/*.js" "${DIR}/*.css")
list(SORT FILES)
set(delimiter "baton_web")
set(body "// Generated from edge_decode/http/web/ by edge_decode/http/web/embed.cmake; do not edit.\n")
string(APPEND body "#include \"edge_decode/http/web_ui.h\"\n\nnamespace baton {\n\n")
string(APPEND body "const std::vector<WebAsset>& web_ui_assets() {\n  static const std::vector<WebAsset> assets = {\n")
foreach(name IN LISTS FILES)
  file(READ "${DIR}/${name}" content)
  string(FIND "${content}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${DIR}/${name} contains )${delimiter}\" and cannot be embedded as a raw string")
  endif()
  if(name STREQUAL "index.html")
    set(url "/")
  else()
    set(url "/${name}")
  endif()
  if(name MATCHES "\\.html$")
    set(type "text/html; charset=utf-8")
  elseif(name MATCHES "\\.js$")
    set(type "text/javascript; charset=utf-8")
  elseif(name MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  else()
    message(FATAL_ERROR "no content type known for ${name}")
  endif()
  string(APPEND body "      {\"${url}\", \"${type}\", R\"${delimiter}(${content})${delimiter}\"},\n")
endforeach()
string(APPEND body "  };\n  return assets;\n}\n\n}  // namespace baton\n")
# Rewrite only on change, so an unchanged page does not recompile.
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL body)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${body}")
