"""A person's passkeys pages and the step-up options the decision pages ask for (views.py), served twice:
under the console for staff (`console_urls`) and under the account for customers (`account_urls`)."""
