#pragma once
// Test certificates made at test time with Debian's openssl: self-signed,
// valid one day, for 127.0.0.1 and localhost. A self-signed certificate is
// its own CA, so it also serves as the roots that trust it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "tests/support/test_models.h"

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

struct TestCertificate {
  std::string cert;  // PEM certificate (self-signed: also the roots that trust it)
  std::string key;   // PEM private key
};

// The certificates of the TLS tests, made once per test binary (check
// have_openssl() first): `server` for 127.0.0.1 and localhost, `client`
// (/CN=edge-1) that a mutual-TLS server trusts by taking it as its client
// CA, and a `stranger` (/CN=stranger) that nobody trusts. A failure to make
// them fails the calling test.
struct TestPki {
  TestCertificate server, client, stranger;
};

inline const TestPki& test_pki() {
  static const TestPki* pki = [] {
    auto* made = new TestPki;  // never freed: the files outlive every test
    const std::string dir = make_temp_dir("test-pki");
    for (const auto& [certificate, name, subject] :
         {std::tuple<TestCertificate*, std::string, std::string>{&made->server, "server", "/CN=localhost"},
          {&made->client, "client", "/CN=edge-1"},
          {&made->stranger, "stranger", "/CN=stranger"}}) {
      *certificate = {dir + "/" + name + "-cert.pem", dir + "/" + name + "-key.pem"};
      EXPECT_TRUE(make_test_certificate(certificate->cert, certificate->key, subject)) << name;
    }
    return made;
  }();
  return *pki;
}

// The whole file (PEM roots, keys); empty when it cannot be read.
inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace baton::testing
