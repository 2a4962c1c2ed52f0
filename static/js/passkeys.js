// Passkeys (WebAuthn) in the browser, without any library:
// - `form[data-passkey-register]`: posts the name and password, gets the options for
//   navigator.credentials.create, posts the new credential to `data-register-url`, then goes where the
//   server says;
// - `form[data-step-up-url]`: before the decision is posted, asks the server for a challenge committing to
//   `data-step-up-digests` (one preview's digest, or a bulk list, in order), has the passkey sign it
//   (navigator.credentials.get, user verification required), and posts the form with the answer in
//   `passkey_assertion`. Without JavaScript the form posts without it and the server says what to do.
(function () {
  "use strict";

  function toBytes(base64url) {
    var base64 = base64url.replace(/-/g, "+").replace(/_/g, "/");
    while (base64.length % 4) { base64 += "="; }
    var text = atob(base64);
    var bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) { bytes[i] = text.charCodeAt(i); }
    return bytes.buffer;
  }

  function toBase64url(buffer) {
    var bytes = new Uint8Array(buffer);
    var text = "";
    for (var i = 0; i < bytes.length; i++) { text += String.fromCharCode(bytes[i]); }
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function withIds(list) {
    return (list || []).map(function (item) {
      var copy = Object.assign({}, item);
      copy.id = toBytes(item.id);
      return copy;
    });
  }

  function creationOptions(options) {
    var publicKey = Object.assign({}, options);
    publicKey.challenge = toBytes(options.challenge);
    publicKey.user = Object.assign({}, options.user, { id: toBytes(options.user.id) });
    publicKey.excludeCredentials = withIds(options.excludeCredentials);
    return publicKey;
  }

  function requestOptions(options) {
    var publicKey = Object.assign({}, options);
    publicKey.challenge = toBytes(options.challenge);
    publicKey.allowCredentials = withIds(options.allowCredentials);
    return publicKey;
  }

  function registrationJSON(credential) {
    var response = credential.response;
    return {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      response: {
        clientDataJSON: toBase64url(response.clientDataJSON),
        attestationObject: toBase64url(response.attestationObject),
        transports: response.getTransports ? response.getTransports() : []
      },
      clientExtensionResults: credential.getClientExtensionResults(),
      authenticatorAttachment: credential.authenticatorAttachment || undefined
    };
  }

  function assertionJSON(credential) {
    var response = credential.response;
    return {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      response: {
        clientDataJSON: toBase64url(response.clientDataJSON),
        authenticatorData: toBase64url(response.authenticatorData),
        signature: toBase64url(response.signature),
        userHandle: response.userHandle ? toBase64url(response.userHandle) : undefined
      },
      clientExtensionResults: credential.getClientExtensionResults(),
      authenticatorAttachment: credential.authenticatorAttachment || undefined
    };
  }

  function csrfToken(form) {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "Accept": "application/json" }
    }).then(function (answer) {
      return answer.json().catch(function () {
        return { ok: false, error: { message: "The server's answer could not be read (" + answer.status + ")." } };
      });
    });
  }

  function say(box, text, link) {
    if (!box) { return; }
    box.textContent = text;
    if (link) {
      box.appendChild(document.createTextNode(" "));
      var anchor = document.createElement("a");
      anchor.href = link.href;
      anchor.textContent = link.text;
      box.appendChild(anchor);
    }
  }

  function ceremonyWords(error) {
    if (error && error.name === "NotAllowedError") {
      return "The passkey was not used (cancelled, or the time ran out). Nothing was decided; try again.";
    }
    return "The passkey could not be used: " + (error && error.message ? error.message : error) + ". Nothing was decided.";
  }

  function register(form) {
    var status = form.querySelector("[role=status]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!window.PublicKeyCredential) {
        say(status, "This browser cannot use passkeys.");
        return;
      }
      say(status, "Checking your password…");
      post(form.action, new FormData(form)).then(function (data) {
        if (!data.ok) { throw new Error(data.error.message); }
        say(status, "Follow your browser's prompt to make the passkey…");
        return navigator.credentials.create({ publicKey: creationOptions(data.options) });
      }).then(function (credential) {
        var body = new FormData();
        body.append("csrfmiddlewaretoken", csrfToken(form));
        body.append("credential", JSON.stringify(registrationJSON(credential)));
        return post(form.dataset.registerUrl, body);
      }).then(function (data) {
        if (!data.ok) { throw new Error(data.error.message); }
        window.location.assign(data.redirect);
      }).catch(function (error) {
        var words = error && error.name === "NotAllowedError"
          ? "No passkey was made (cancelled, or the time ran out)." : (error.message || String(error));
        say(status, words);
      });
    });
  }

  function stepUp(form) {
    var status = document.getElementById(form.dataset.stepUpStatus) || form.querySelector("[role=status]");
    var assertion = form.querySelector("input[name=passkey_assertion]");
    var signed = false;
    form.addEventListener("submit", function (event) {
      if (signed) { return; }
      event.preventDefault();
      if (!window.PublicKeyCredential) {
        say(status, "This browser cannot use passkeys; nothing was decided.");
        return;
      }
      var body = new FormData();
      body.append("csrfmiddlewaretoken", csrfToken(form));
      form.dataset.stepUpDigests.split(" ").forEach(function (digest) {
        if (digest) { body.append("digest", digest); }
      });
      say(status, "Confirm with your passkey: follow your browser's prompt…");
      post(form.dataset.stepUpUrl, body).then(function (data) {
        if (!data.ok) {
          var link = data.error.register_url ? { href: data.error.register_url, text: "Add a passkey" } : null;
          say(status, data.error.message, link);
          return null;
        }
        return navigator.credentials.get({ publicKey: requestOptions(data.options) }).then(function (credential) {
          assertion.value = JSON.stringify(assertionJSON(credential));
          signed = true;
          say(status, "Signed with your passkey; sending…");
          form.submit();
        });
      }).catch(function (error) {
        say(status, ceremonyWords(error));
      });
    });
  }

  document.querySelectorAll("form[data-passkey-register]").forEach(register);
  document.querySelectorAll("form[data-step-up-url]").forEach(stepUp);
})();
