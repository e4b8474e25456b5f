#pragma once
// Test certificates made at test time with Debian's openssl: self-signed,
// valid one day, for 127.0.0.1 and localhost. A self-signed certificate is
// its own CA, so it also serves as the roots that trust it.
#include <cstdlib>
#include <string>

namespace baton::testing {

// True when `openssl` is on PATH (tests skip otherwise).
inline bool have_openssl() { return std::system("command -v openssl > /dev/null 2>&1") == 0; }

// Writes a new key and certificate with `subject` (e.g. "/CN=localhost");
// true on success.
inline bool make_test_certificate(const std::string& cert_path, const std::string& key_path,
                                  const std::string& subject = "/CN=localhost") {
  const std::string command = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj " + subject +
                              " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " + key_path + " -out " +
                              cert_path + " > /dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

}  // namespace baton::testing
