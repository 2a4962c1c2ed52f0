"""Passkeys (WebAuthn): a person's credentials, the single-use step-up challenges a decision is signed
over, and the signature kept with an approval (approvals.core.services.passkeys)."""

from django.conf import settings
from django.db import models

from approvals.models.previews import Approval


class Passkey(models.Model):
    """One of a person's passkeys: its public key (COSE) and what the authenticator said at registration."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys")
    name = models.CharField(max_length=64, help_text="The person's own name for it, e.g. 'Work laptop'.")
    credential_id = models.BinaryField(max_length=1023)
    public_key = models.BinaryField(help_text="The credential's public key, COSE-encoded.")
    sign_count = models.PositiveBigIntegerField(default=0, help_text="The highest signature counter seen.")
    transports = models.JSONField(default=list)
    aaguid = models.CharField(max_length=36, blank=True)
    backed_up = models.BooleanField(default=False, help_text="A synced passkey (its counter may stay 0).")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["credential_id"], name="one_passkey_per_credential"),
            models.UniqueConstraint(fields=["user", "name"], name="passkey_names_differ_per_person"),
        ]
        permissions = [("manage_passkeys", "Can remove a staff member's passkeys (a lost device)")]

    def __str__(self) -> str:
        return f"passkey {self.name!r} of {self.user_id}"


class StepUpChallenge(models.Model):
    """A single-use challenge a passkey signs: SHA-256 over a random nonce and the digests of the previews
    it approves (approvals.core.passkey_challenge), bound to the person who asked for it. Each digest of
    the list may be approved with it once (`used_digests`), until `expires_at`."""

    person = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    nonce = models.BinaryField(max_length=32)
    challenge = models.BinaryField(max_length=32)
    digests = models.JSONField(help_text="The previews' digests, in the order the challenge commits to them.")
    used_digests = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, help_text="When a signature over it was first accepted.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["challenge"], name="one_step_up_per_challenge")]
        indexes = [models.Index(fields=["person", "expires_at"], name="step_up_person_expiry_idx")]

    def __str__(self) -> str:
        return f"step-up challenge of {self.person_id} over {len(self.digests)} digest(s)"


class ApprovalSignature(models.Model):
    """The passkey assertion an approval was given with, kept whole so that anyone holding it can check it
    offline (approvals.audit.passkey_check): the credential and its public key as they were, what the
    authenticator signed (authenticatorData, clientDataJSON), the signature, and the challenge's nonce and
    digests. Written once, with the approval."""

    approval = models.OneToOneField(Approval, on_delete=models.PROTECT, primary_key=True, related_name="signature")
    passkey = models.ForeignKey(Passkey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    passkey_name = models.CharField(max_length=64)
    credential_id = models.BinaryField(max_length=1023)
    public_key = models.BinaryField()
    authenticator_data = models.BinaryField()
    client_data_json = models.BinaryField()
    signature = models.BinaryField()
    nonce = models.BinaryField(max_length=32)
    digests = models.JSONField()
    rp_id = models.CharField(max_length=253)
    origin = models.CharField(max_length=300)
    sign_count = models.PositiveBigIntegerField()
    counter_regressed = models.BooleanField(
        default=False, help_text="The counter did not go up past the highest one seen: a cloned authenticator?"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"passkey signature of approval {self.approval_id}"
